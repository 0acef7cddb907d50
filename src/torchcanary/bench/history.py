"""The bench's part of comparing two runs: each benchmark's verdict and ratio interval.

``torchcanary compare`` reads it through the section contract. A benchmark moved when its
verdict changed or when the two runs' intervals for the ratio do not overlap (each run's
interval already carries that run's noise); a skipped benchmark has no interval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchcanary.bench.result import BenchMeasured, BenchVerdict, from_rows
from torchcanary.bench.section import SECTION

if TYPE_CHECKING:
    from torchcanary.section_types import RunView

# A benchmark gone slower is a change for the worse; one gone faster, or too noisy to say, is not.
WORSE_VERDICTS = frozenset({BenchVerdict.SLOWER.value})


def compared(view: RunView) -> dict[str, dict[str, Any]]:
    """Each benchmark's verdict and ratio interval in ``view`` (None where it was skipped)."""
    found = {}
    for result in from_rows(view.sections.get(SECTION, [])):
        measured = result if isinstance(result, BenchMeasured) else None  # skipped: no interval
        found[result.key] = {
            "verdict": result.verdict.value,
            "ratio": measured.ratio if measured else None,
            "ci_low": measured.ci_low if measured else None,
            "ci_high": measured.ci_high if measured else None,
        }
    return found
