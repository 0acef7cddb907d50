"""The bench section's entry in the section contract (registered in pyproject.toml).

The package is ``measure``; the section, its config table and its subcommand are ``bench``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
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
    SectionResult,
    UnitOutcome,
)

if TYPE_CHECKING:
    from torchcanary.results import SectionRecord
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry
    from torchcanary.store.rows import RunRow

_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h`` as seconds; argparse turns the ValueError into usage."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write seconds or a number with s, m or h, e.g. 5m"
        )
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--budget",
        type=duration,
        metavar="DURATION",
        help="most time the bench may spend measuring, e.g. 5m; benchmarks still undecided "
        "then are judged on what they have (default: all groups)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        dest="bench_workloads",
        metavar="TARGET",
        help="also time your own step, e.g. 'myproject.bench:train_step' or "
        "'bench.py:infer_step': a function that sets up and returns the callable to time "
        '(repeatable; options in [[bench.benchmarks]] kind = "workload")',
    )
    if own_command:
        parser.add_argument(
            "--aa",
            action="store_true",
            help="A/A: the baseline against itself, "
            "to measure the false-alarm rate and minimum detectable effect",
        )
        # On ``run`` the stack's --with serves both sections.
        parser.add_argument(
            "--with",
            action="append",
            dest="bench_with",
            metavar="REQ",
            help="install this into a per-run overlay of both environments for your "
            "workloads, e.g. '-e .' (repeatable)",
        )
        parser.add_argument(
            "--nodes",
            type=int,
            help="with --fleet: the collectives family with one rank on each of this many "
            "Ray nodes (STRICT_SPREAD), algbw and busbw per op (see docs/fleet.md)",
        )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"aa": True} if getattr(args, "aa", False) else {}
    if getattr(args, "budget", None) is not None:
        settings["budget_s"] = args.budget
    if getattr(args, "bench_workloads", None):
        settings["workloads"] = list(args.bench_workloads)
    requirements = getattr(args, "bench_with", None) or getattr(args, "stack_with", None)
    if requirements:
        settings["with"] = list(requirements)
    return settings


class BenchSection(Section):
    """The bench section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "bench"
    order = 20
    help = "performance A/B only (interleaved, with CIs)"

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.bench import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.bench import section

        return section.CHECKED_VERDICTS

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        from torchcanary.bench import section

        return section.POLICY_BOUNDS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.bench import section

        return section.parse_settings(dict(raw))

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.bench import section

        return section.outputs(dict(settings))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.bench import section

        return section.planned_units(plan)

    @property
    def across_nodes(self) -> Callable[..., Any] | None:
        from torchcanary.bench import across_nodes

        return across_nodes.venue

    def run(self, ctx: RunContext) -> None:
        from torchcanary.bench import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.bench import result

        return result.from_json(dict(data))

    def load_view(self, store: ResultStore, run: RunRow, rows: list[SectionResult]) -> Any:
        from torchcanary.bench import view

        return view.load(store, run, rows)

    def stored_units(self, view: RunView) -> list[UnitOutcome] | None:
        from torchcanary.bench import section

        return section.stored_units(view)

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.bench import section

        return section.blocking_reasons(view, dict(policy))

    def findings(self, view: RunView) -> list[Finding]:
        from torchcanary.bench import findings

        return findings.findings(view)

    def html(self, view: RunView) -> str:
        from torchcanary.bench import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.bench import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.bench import report

        return report.junit_cases(view)

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        from torchcanary.bench import report

        return report.reused(view)

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        from torchcanary.bench import history

        return history.compared(view)

    @property
    def worse_verdicts(self) -> frozenset[str]:
        from torchcanary.bench import history

        return history.WORSE_VERDICTS

    def history_plot(self, item: str, entries: list[HistoryEntry]) -> str | None:
        from torchcanary.bench import report

        return report.history_plot(item, entries)


SECTION = BenchSection()
