"""The stack section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the command as a positional; ``run`` takes it as ``--stack``, and
giving it there asks for the section even when ``--only`` leaves it out.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
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
)

if TYPE_CHECKING:
    from torchcanary.results import SectionRecord
from torchcanary.user_command import flags as user_flags

_FLAG = "stack"  # --stack COMMAND on run; the options' names start stack_


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    user_flags.add_flags(parser, own_command, flag=_FLAG)


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    return user_flags.flag_settings(args, flag=_FLAG)


def named_by(args: argparse.Namespace) -> bool:
    """``run --stack COMMAND`` asks for the stack section by giving its command."""
    return user_flags.command_given(args, flag=_FLAG)


def missing_input(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    if str(settings.get("command", "")).strip():
        return None
    return (
        "the stack section has no command to run; give one, e.g. "
        "`torchcanary stack 'pytest tests/'`, `--stack 'pytest tests/'` or "
        'command = "pytest tests/" under [stack]',
        "no command to run (add one with --stack 'pytest tests/')",
    )


class StackSection(Section):
    """The stack section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "stack"
    order = 40
    help = "your own test suite or script under both versions"

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    def named_by(self, args: argparse.Namespace) -> bool:
        return named_by(args)

    def missing_input(self, settings: Mapping[str, Any]) -> tuple[str, str] | None:
        return missing_input(settings)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.stack import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.stack import section

        return section.CHECKED_VERDICTS

    @property
    def policy_choices(self) -> Mapping[str, tuple[str, ...]]:
        from torchcanary.stack import section

        return section.POLICY_CHOICES

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        from torchcanary.stack import section

        return section.POLICY_BOUNDS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.stack import section

        return section.parse_settings(dict(raw))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.stack import section

        return section.planned_units(plan)

    def run(self, ctx: RunContext) -> None:
        from torchcanary.stack import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.stack import result

        return result.from_json(dict(data))

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.stack import section

        return section.blocking_reasons(view, dict(policy))

    def findings(self, view: RunView) -> list[Finding]:
        from torchcanary.stack import findings

        return findings.findings(view)

    def html(self, view: RunView) -> str:
        from torchcanary.stack import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.stack import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.stack import report

        return report.junit_cases(view)


SECTION = StackSection()
