"""The claims section's entry in the section contract (registered in pyproject.toml).

Claims has no subcommand of its own (``torchcanary run --only claims``): its flags are
``run``'s (``--probes``, ``--release``, ...; ``claims/settings.py``); its results are
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
    """Which claims to probe, and how (on ``run``: the claims have no command of their own)."""
    parser.add_argument("--probes", help="comma-separated probe id patterns, e.g. 'c10d.*,nccl2.*'")
    parser.add_argument(
        "--probe-module",
        action="append",
        dest="probe_modules",
        help="extra module of probes to load (repeatable)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        dest="probe_timeout_s",
        help="seconds per probe, overriding each probe's own timeout",
    )
    parser.add_argument(
        "--release",
        help="claims pack to qualify against, e.g. 2.14 (default: the candidate's release)",
    )
    parser.add_argument(
        "--regression",
        action="append",
        metavar="RELEASE",
        help="also check an older release's pack, e.g. 2.13: do its claims still hold?",
    )
    parser.add_argument(
        "--fresh-claims",
        action="store_true",
        default=None,
        help="run every claim probe again instead of reusing the verdicts kept from earlier "
        "runs of the same environments on this machine (claims.reuse = false)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags given set in the claims table (flags win over the file)."""
    settings: dict[str, Any] = {}
    probes = [p.strip() for p in (getattr(args, "probes", None) or "").split(",") if p.strip()]
    if probes:
        settings["probes"] = probes
    for key in ("probe_modules", "probe_timeout_s", "release", "regression"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "fresh_claims", None):
        settings["reuse"] = False
    return settings


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
