"""The claims section's entry in the section contract (registered in pyproject.toml).

Claims has no subcommand of its own (``torchcanary run --only claims``); its results are
probe results, stored apart from the other sections' rows (``result_table``) and read
through ``claims/view.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchcanary.sections import PackageSection

if TYPE_CHECKING:
    from torchcanary.report.view import RunView


@dataclass(frozen=True)
class ClaimsSection(PackageSection):
    def has_results(self, view: RunView) -> bool:
        from torchcanary.claims.view import claims_of

        return bool(claims_of(view).probe_results)


SECTION = ClaimsSection(
    name="claims", package="torchcanary.claims", order=10, result_table="probe_results"
)
