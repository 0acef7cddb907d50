"""The stack section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the command as a positional; ``run`` takes it as ``--stack``, and
giving it there asks for the section even when ``--only`` leaves it out.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from torchcanary.package_section import PackageSection


def _env_assignment(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE, e.g. --env OMP_NUM_THREADS=4")
    return key.strip(), value


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if own_command:
        parser.add_argument("stack", metavar="COMMAND", help="e.g. 'pytest tests/'")
    else:
        parser.add_argument(
            "--stack",
            metavar="COMMAND",
            help="also run your suite in both versions, e.g. 'pytest tests/'",
        )
    parser.add_argument(
        "--with",
        action="append",
        dest="stack_with",
        metavar="REQ",
        help="install this into both environments first, e.g. '-e .'",
    )
    parser.add_argument(
        "--requirements",
        action="append",
        dest="stack_requirements",
        metavar="FILE",
        help="requirements file to install into both",
    )
    parser.add_argument(
        "--env",
        action="append",
        dest="stack_env",
        type=_env_assignment,
        metavar="KEY=VALUE",
        help="environment variable for your command in both versions (repeatable; "
        "replaces stack.env from the config)",
    )
    parser.add_argument(
        "--cwd", dest="stack_cwd", metavar="DIR", help="directory to run your command in"
    )
    parser.add_argument(
        "--reruns",
        type=int,
        dest="stack_reruns",
        metavar="N",
        help="re-runs in both versions of each new failure, to tell flaky from broken (default 3)",
    )
    parser.add_argument(
        "--command-timeout",
        type=float,
        dest="stack_timeout_s",
        metavar="SECONDS",
        help="seconds your command may run in each version (default 3600)",
    )
    parser.add_argument(
        "--test-timeout",
        type=float,
        dest="stack_test_timeout_s",
        metavar="SECONDS",
        help="seconds one pytest test may run; after a hang pytest goes on with the rest "
        "(default 600, 0 for none)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if getattr(args, "stack", None) is not None:  # given empty is refused, not ignored
        settings["command"] = args.stack
    if getattr(args, "stack_with", None):
        settings["with"] = args.stack_with
    if getattr(args, "stack_requirements", None):
        settings["requirements"] = args.stack_requirements
    if getattr(args, "stack_env", None):
        settings["env"] = dict(args.stack_env)
    for flag, key in (
        ("stack_cwd", "cwd"),
        ("stack_reruns", "reruns"),
        ("stack_timeout_s", "timeout_s"),
        ("stack_test_timeout_s", "test_timeout_s"),
    ):
        if getattr(args, flag, None) is not None:
            settings[key] = getattr(args, flag)
    return settings


def named_by(args: argparse.Namespace) -> bool:
    """``run --stack COMMAND`` asks for the stack section by giving its command."""
    return args.command == "run" and getattr(args, "stack", None) is not None


def missing_input(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    if str(settings.get("command", "")).strip():
        return None
    return (
        "the stack section has no command to run; give one, e.g. "
        "`torchcanary stack 'pytest tests/'`, `--stack 'pytest tests/'` or "
        'command = "pytest tests/" under [stack]',
        "no command to run (add one with --stack 'pytest tests/')",
    )


SECTION = PackageSection(
    name="stack",
    package="torchcanary.stack",
    order=40,
    help="your own test suite or script under both versions",
    flags=add_flags,
    settings_from_flags=flag_settings,
    named_by_flags=named_by,
    input_check=missing_input,
)
