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

from torchcanary.package_section import PackageSection
from torchcanary.stack import plugin as stack_plugin


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if own_command:
        stack_plugin.add_flags(parser, own_command)
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
    settings = stack_plugin.flag_settings(args)
    if getattr(args, "calls_replay_timeout_s", None) is not None:
        settings["replay_timeout_s"] = args.calls_replay_timeout_s
    return settings


def named_by(args: argparse.Namespace) -> bool:
    """``run --stack COMMAND`` records and replays those calls too (``run --workload
    TARGET`` does through the bench's output: :func:`fed_by`)."""
    return stack_plugin.named_by(args)


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


SECTION = PackageSection(
    name="calls",
    package="torchcanary.calls",
    order=45,
    help="your suite's torch calls, recorded under the baseline and replayed in the candidate: "
    "what now raises, returns something else or warns, while your tests still pass",
    flags=add_flags,
    settings_from_flags=flag_settings,
    named_by_flags=named_by,
    input_check=missing_input,
    input_elsewhere=fed_by,
)
