"""The diff section's entry in the section contract (registered in pyproject.toml).

The package is ``surface`` (what it compares); the section and its subcommand are ``diff``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchcanary.contract import (
    Finding,
    JUnitCase,
    PlannedUnit,
    RunContext,
    RunPlan,
    RunView,
    Section,
)

if TYPE_CHECKING:
    from torchcanary.results import SectionRecord


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--code",
        dest="diff_code",
        metavar="PATH",
        help="your Python sources to scan for changed names (default: the stack's project)",
    )
    parser.add_argument(
        "--notes",
        action="append",
        dest="diff_notes",
        metavar="FILE",
        help="release-notes text that counts as announcing a change (repeatable)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if getattr(args, "diff_code", None):
        settings["code"] = args.diff_code
    if getattr(args, "diff_notes", None):
        settings["notes"] = args.diff_notes
    return settings


class DiffSection(Section):
    """The diff section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "diff"
    order = 50
    help = "what changed in the build that the notes don't say, and where your code meets it"

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.diff import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.diff import section

        return section.CHECKED_VERDICTS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.diff import section

        return section.parse_settings(dict(raw))

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.diff import section

        return section.outputs(dict(settings))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.diff import section

        return section.planned_units(plan)

    def run(self, ctx: RunContext) -> None:
        from torchcanary.diff import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.diff import result

        return result.from_json(dict(data))

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.diff import section

        return section.blocking_reasons(view, dict(policy))

    def findings(self, view: RunView) -> list[Finding]:
        from torchcanary.diff import findings

        return findings.findings(view)

    def html(self, view: RunView) -> str:
        from torchcanary.diff import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.diff import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.diff import report

        return report.junit_cases(view)

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        from torchcanary.diff import report

        return report.reused(view)


SECTION = DiffSection()
