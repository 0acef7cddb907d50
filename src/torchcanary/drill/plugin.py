"""The drill section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.contract import (
    Finding,
    JUnitCase,
    PlannedUnit,
    PolicyBounds,
    RunContext,
    RunPlan,
    RunView,
    Section,
    UnitOutcome,
)

if TYPE_CHECKING:
    from torchcanary.results import SectionRecord


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if not own_command:
        return  # `run` takes the drills from the config's [drill] table
    parser.add_argument(
        "--faults", help="comma-separated drills, e.g. 'kill:restart,hang:timeout', or 'all'"
    )
    parser.add_argument("--ranks", type=int, help="ranks per job (2 to 4)")
    parser.add_argument("--steps", type=int, help="training steps per job")
    parser.add_argument("--at-step", type=int, dest="at_step", help="step at which to inject")
    parser.add_argument(
        "--job",
        metavar="SCRIPT_AND_ARGS",
        help="drill your own script instead of the built-in job, e.g. 'train.py --config "
        "small.yaml' (started with torchrun --nproc-per-node; see docs/drills.md)",
    )
    parser.add_argument(
        "--with",
        action="append",
        dest="drill_with",
        metavar="REQ",
        help="install this into both environments for --job first, e.g. '-e .'",
    )
    parser.add_argument("--nproc", type=int, dest="ranks", help="ranks per job (as --ranks)")
    parser.add_argument(
        "--job-cwd", dest="job_cwd", metavar="DIR", help="the folder --job starts in"
    )
    parser.add_argument(
        "--job-env",
        action="append",
        dest="job_env",
        metavar="KEY=VALUE",
        help="a variable for --job (repeatable; replaces the config's job_env)",
    )
    parser.add_argument(
        "--fresh-reference",
        action="store_true",
        default=None,
        dest="job_fresh_reference",
        help="make the job's fault-free run again instead of reusing the one cached for "
        "the same job, files and environment",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        help="with --fleet: one rank on each of this many Ray nodes (STRICT_SPREAD), "
        "faults including node-kill (see docs/fleet.md)",
    )
    parser.add_argument(
        "--shared-dir",
        type=Path,
        dest="shared_dir",
        help="with --nodes: a folder every node sees, for the job's checkpoints "
        "(default: the output folder, which a cluster on one machine shares)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    faults = getattr(args, "faults", None)
    if faults:
        settings["faults"] = (
            "all" if faults == "all" else [p.strip() for p in faults.split(",") if p.strip()]
        )
    for key in ("ranks", "steps", "at_step", "job", "job_cwd", "job_env", "job_fresh_reference"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "drill_with", None):
        settings["job_with"] = list(args.drill_with)
    return settings


class DrillSection(Section):
    """The drill section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "drill"
    order = 30
    help = "fault drills on a distributed training job only"

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.drill import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.drill import section

        return section.CHECKED_VERDICTS

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        from torchcanary.drill import section

        return section.POLICY_BOUNDS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.drill import section

        return section.parse_settings(dict(raw))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.drill import section

        return section.planned_units(plan)

    @property
    def across_nodes(self) -> Callable[..., Any] | None:
        from torchcanary.drill import across_nodes

        return across_nodes.venue

    def run(self, ctx: RunContext) -> None:
        from torchcanary.drill import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.drill import result

        return result.from_json(dict(data))

    def stored_units(self, view: RunView) -> list[UnitOutcome] | None:
        from torchcanary.drill import section

        return section.stored_units(view)

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.drill import section

        return section.blocking_reasons(view, dict(policy))

    def findings(self, view: RunView) -> list[Finding]:
        from torchcanary.drill import findings

        return findings.findings(view)

    def html(self, view: RunView) -> str:
        from torchcanary.drill import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.drill import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.drill import report

        return report.junit_cases(view)

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        from torchcanary.drill import report

        return report.reused(view)

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        from torchcanary.drill import history

        return history.compared(view)

    @property
    def worse_verdicts(self) -> frozenset[str]:
        from torchcanary.drill import history

        return history.WORSE_VERDICTS


SECTION = DrillSection()
