"""The drill's part of comparing two runs: each drill's verdict in each environment.

``torchcanary compare`` reads it through the section contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchcanary.drill.result import DrillVerdict, from_rows
from torchcanary.drill.section import SECTION

if TYPE_CHECKING:
    from torchcanary.section_types import RunView

# A drill that no longer recovers every time: failed, broke the harness, or flaky.
WORSE_VERDICTS = frozenset(
    {DrillVerdict.FAILED.value, DrillVerdict.ERROR.value, DrillVerdict.FLAKY.value}
)


def compared(view: RunView) -> dict[str, dict[str, Any]]:
    """Each drill's verdict in ``view``, one item per drill and environment role."""
    return {
        f"{result.key} ({result.env_role})": {"verdict": str(result.verdict)}
        for result in from_rows(view.sections.get(SECTION, []))
    }
