"""The claims section's entry in the section contract (registered in pyproject.toml).

Claims has no subcommand of its own (``torchcanary run --only claims``): its flags are
``run``'s (``--probes``, ``--release``, ...; ``claims/settings.py``); its results are
probe results, stored apart from the other sections' rows (``result_table``) and read
through ``claims/view.py``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchcanary.claims.records import TABLE
from torchcanary.contract import (
    Finding,
    FleetPart,
    JUnitCase,
    PlannedUnit,
    RunContext,
    RunPlan,
    RunView,
    Section,
    SectionResult,
    UnitOutcome,
)

if TYPE_CHECKING:
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry, HistoryFilter
    from torchcanary.store.rows import RunRow


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


class ClaimsSection(Section):
    """The claims section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "claims"
    order = 10
    help = None
    result_table = TABLE

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    def has_results(self, view: RunView) -> bool:
        from torchcanary.claims.view import claims_of

        return bool(claims_of(view).probe_results)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.claims import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.claims import section

        return section.CHECKED_VERDICTS

    @property
    def policy_choices(self) -> Mapping[str, tuple[str, ...]]:
        from torchcanary.claims import section

        return section.POLICY_CHOICES

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.claims import section

        return section.parse_settings(dict(raw))

    def add_commands(self, commands: Any) -> dict[str, Any]:
        from torchcanary.claims import commands as claims_commands

        return claims_commands.add_commands(commands)

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.claims import section

        return section.outputs(dict(settings))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.claims import section

        return section.planned_units(plan)

    def check_plan(self, plan: RunPlan) -> None:
        from torchcanary.claims import section

        section.check_plan(plan)

    def worker_packages(self, plan: RunPlan) -> set[str]:
        from torchcanary.claims import section

        return section.worker_packages(plan)

    def fit_plan(self, plan: RunPlan, profile: Any) -> tuple[RunPlan, dict[str, str]]:
        from torchcanary.claims import fit

        return fit.fit_plan(plan, profile)

    def run(self, ctx: RunContext) -> None:
        from torchcanary.claims import section

        section.run(ctx)

    def load_view(self, store: ResultStore, run: RunRow, rows: list[SectionResult]) -> Any:
        from torchcanary.claims import view

        return view.load(store, run, rows)

    def stored_units(self, view: RunView) -> list[UnitOutcome] | None:
        from torchcanary.claims import section

        return section.stored_units(view)

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.claims import section

        return section.blocking_reasons(view, dict(policy))

    def findings(self, view: RunView) -> list[Finding]:
        from torchcanary.claims import findings

        return findings.findings(view)

    def html(self, view: RunView) -> str:
        from torchcanary.claims import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.claims import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.claims import report

        return report.junit_cases(view)

    def terminal(self, view: RunView) -> list[Any] | None:
        from torchcanary.claims import report

        return report.terminal(view)

    def json_parts(self, view: RunView) -> dict[str, Any]:
        from torchcanary.claims import report

        return report.json_parts(view)

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        from torchcanary.claims import report

        return report.reused(view)

    def fleet_part(self, view: RunView) -> FleetPart | None:
        from torchcanary.claims import fleet

        return fleet.fleet_part(view)

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        from torchcanary.claims import history

        return history.compared(view)

    @property
    def worse_verdicts(self) -> frozenset[str]:
        from torchcanary.claims import history

        return history.WORSE_VERDICTS

    def history(
        self, store: ResultStore, item: str, run_filter: HistoryFilter
    ) -> list[HistoryEntry] | None:
        from torchcanary.claims import history

        return history.history(store, item, run_filter)

    def holds(self, store: ResultStore, item: str) -> bool | None:
        from torchcanary.claims import history

        return history.holds(store, item)


SECTION = ClaimsSection()
