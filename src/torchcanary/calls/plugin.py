"""The calls section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the stack's options (``torchcanary calls 'pytest tests/' --with
'-e .'``); in ``run`` it adds no flags of its own and records the stack's command and the
bench's workloads whenever one is given (``--stack``, read with the stack's other options;
``--workload``, the bench's flag, whose workloads the bench offers as its output).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchcanary.contract import (
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

# The user's command is given as the stack's (--stack on run, with the stack's options).
_FLAG = "stack"


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if own_command:
        user_flags.add_flags(parser, own_command, flag=_FLAG)
        parser.add_argument(
            "--replay-timeout",
            type=float,
            dest="calls_replay_timeout_s",
            metavar="SECONDS",
            help="seconds one replayed call may take before it is stopped and reported as "
            "a timeout (default 60)",
        )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The stack's options (on ``run``: ``--stack`` and the rest), plus the replay's own.
    The bench's workloads (``--workload``) arrive as its output instead (:func:`fed_by`)."""
    settings = user_flags.flag_settings(args, flag=_FLAG)
    if getattr(args, "calls_replay_timeout_s", None) is not None:
        settings["replay_timeout_s"] = args.calls_replay_timeout_s
    return settings


def named_by(args: argparse.Namespace) -> bool:
    """``run --stack COMMAND`` records and replays those calls too (``run --workload
    TARGET`` does through the bench's output: :func:`fed_by`)."""
    return user_flags.command_given(args, flag=_FLAG)


def missing_input(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    if str(settings.get("command", "")).strip() or settings.get("workloads"):
        return None
    return (
        "the calls section has no command or workload to record; give one, e.g. "
        "`torchcanary calls 'pytest tests/'`, `run --stack 'pytest tests/'` or "
        "`run --workload pkg.bench:step`",
        "no command or workload to record (add --stack 'pytest tests/' or --workload pkg.m:step)",
    )


def fed_by(outputs: Mapping[str, Any]) -> bool:
    """A run whose bench times workloads (``[bench] workloads``, a ``kind = "workload"``
    benchmark, or ``--workload``: the bench's output ``workloads``) records their calls
    too, with no ``[calls]`` table."""
    return bool(outputs.get("workloads"))


class CallsSection(Section):
    """The calls section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "calls"
    order = 45
    help = (
        "your suite's torch calls, recorded under the baseline and replayed in the candidate: "
        "what now raises, returns something else or warns, while your tests still pass"
    )

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    def named_by(self, args: argparse.Namespace) -> bool:
        return named_by(args)

    def missing_input(self, settings: Mapping[str, Any]) -> tuple[str, str] | None:
        return missing_input(settings)

    def fed_by(self, outputs: Mapping[str, Any]) -> bool:
        return fed_by(outputs)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.calls import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.calls import section

        return section.CHECKED_VERDICTS

    @property
    def policy_choices(self) -> Mapping[str, tuple[str, ...]]:
        from torchcanary.calls import section

        return section.POLICY_CHOICES

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        from torchcanary.calls import section

        return section.POLICY_BOUNDS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.calls import section

        return section.parse_settings(dict(raw))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.calls import section

        return section.planned_units(plan)

    def run(self, ctx: RunContext) -> None:
        from torchcanary.calls import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.calls import result

        return result.from_json(dict(data))

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.calls import section

        return section.blocking_reasons(view, dict(policy))

    def html(self, view: RunView) -> str:
        from torchcanary.calls import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.calls import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.calls import report

        return report.junit_cases(view)

    def json_parts(self, view: RunView) -> dict[str, Any]:
        from torchcanary.calls import report

        return report.json_parts(view)


SECTION = CallsSection()
