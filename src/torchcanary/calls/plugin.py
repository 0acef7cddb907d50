"""The calls section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the stack's options (``torchcanary calls 'pytest tests/' --with
'-e .'``); in ``run`` it adds no flags of its own and records the stack's command and the
bench's workloads whenever one is given (``--stack``, read with the stack's other options;
``--workload``, the bench's flag, whose workloads the bench offers as its output).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from torchcanary.contract import FromModule, Section
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
    """The calls section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "calls"
    order = 45
    help = (
        "your suite's torch calls, recorded under the baseline and replayed in the candidate: "
        "what now raises, returns something else or warns, while your tests still pass"
    )

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    named_by = staticmethod(named_by)
    missing_input = staticmethod(missing_input)
    fed_by = staticmethod(fed_by)
    policy_defaults = FromModule("torchcanary.calls.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.calls.section:CHECKED_VERDICTS")
    policy_choices = FromModule("torchcanary.calls.section:POLICY_CHOICES")
    policy_bounds = FromModule("torchcanary.calls.section:POLICY_BOUNDS")
    parse_settings = FromModule("torchcanary.calls.section:parse_settings")
    planned_units = FromModule("torchcanary.calls.section:planned_units")
    run = FromModule("torchcanary.calls.section:run")
    record_from_json = FromModule("torchcanary.calls.result:from_json")
    blocking_reasons = FromModule("torchcanary.calls.section:blocking_reasons")
    html = FromModule("torchcanary.calls.report:html")
    markdown = FromModule("torchcanary.calls.report:markdown")
    junit_cases = FromModule("torchcanary.calls.report:junit_cases")
    json_parts = FromModule("torchcanary.calls.report:json_parts")
    reproducible = FromModule("torchcanary.calls.repro:reproducible")


SECTION = CallsSection()
