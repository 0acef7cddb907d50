"""The claims section's entry in the section contract (registered in pyproject.toml).

Claims has no subcommand of its own (``torchcanary run --only claims``); its results are
probe results, stored apart from the other sections' rows (``result_table``) and read
through ``claims/view.py``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchcanary.claims.records import TABLE
from torchcanary.package_section import PackageSection

if TYPE_CHECKING:
    from torchcanary.section_types import RunView


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--fresh-claims",
        action="store_true",
        default=None,
        help="run every claim probe again instead of reusing the verdicts kept from earlier "
        "runs of the same environments on this machine (claims.reuse = false)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"reuse": False} if getattr(args, "fresh_claims", None) else {}


@dataclass(frozen=True)
class ClaimsSection(PackageSection):
    def has_results(self, view: RunView) -> bool:
        from torchcanary.claims.view import claims_of

        return bool(claims_of(view).probe_results)


SECTION = ClaimsSection(
    name="claims",
    package="torchcanary.claims",
    order=10,
    result_table=TABLE,
    flags=add_flags,
    settings_from_flags=flag_settings,
)
