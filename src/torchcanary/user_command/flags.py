"""The user's command as command-line options: the command, ``--with``, ``--requirements``,
``--env``, ``--cwd``, ``--reruns`` and the timeouts, read into the command's settings.

Every section that runs the user's command reads the same options (on ``run`` they are
given once); ``flag`` is the name the command is given under: the positional of a
section's own subcommand, ``--<flag>`` on ``run``, and the prefix of the other options'
names in the parsed arguments.
"""

from __future__ import annotations

import argparse
from typing import Any


def _env_assignment(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE, e.g. --env OMP_NUM_THREADS=4")
    return key.strip(), value


def add_flags(parser: argparse.ArgumentParser, own_command: bool, *, flag: str) -> None:
    if own_command:
        parser.add_argument(flag, metavar="COMMAND", help="e.g. 'pytest tests/'")
    else:
        parser.add_argument(
            f"--{flag}",
            metavar="COMMAND",
            help="also run your suite in both versions, e.g. 'pytest tests/'",
        )
    parser.add_argument(
        "--with",
        action="append",
        dest=f"{flag}_with",
        metavar="REQ",
        help="install this into both environments first, e.g. '-e .'",
    )
    parser.add_argument(
        "--requirements",
        action="append",
        dest=f"{flag}_requirements",
        metavar="FILE",
        help="requirements file to install into both",
    )
    parser.add_argument(
        "--env",
        action="append",
        dest=f"{flag}_env",
        type=_env_assignment,
        metavar="KEY=VALUE",
        help="environment variable for your command in both versions (repeatable; "
        "replaces stack.env from the config)",
    )
    parser.add_argument(
        "--cwd", dest=f"{flag}_cwd", metavar="DIR", help="directory to run your command in"
    )
    parser.add_argument(
        "--reruns",
        type=int,
        dest=f"{flag}_reruns",
        metavar="N",
        help="re-runs in both versions of each new failure, to tell flaky from broken (default 3)",
    )
    parser.add_argument(
        "--command-timeout",
        type=float,
        dest=f"{flag}_timeout_s",
        metavar="SECONDS",
        help="seconds your command may run in each version (default 3600)",
    )
    parser.add_argument(
        "--test-timeout",
        type=float,
        dest=f"{flag}_test_timeout_s",
        metavar="SECONDS",
        help="seconds one pytest test may run; after a hang pytest goes on with the rest "
        "(default 600, 0 for none)",
    )


def flag_settings(args: argparse.Namespace, *, flag: str) -> dict[str, Any]:
    """The command's settings the options gave (a key only where its option was given)."""
    settings: dict[str, Any] = {}
    if getattr(args, flag, None) is not None:  # given empty is refused, not ignored
        settings["command"] = getattr(args, flag)
    for key in ("with", "requirements"):
        if getattr(args, f"{flag}_{key}", None):
            settings[key] = getattr(args, f"{flag}_{key}")
    if getattr(args, f"{flag}_env", None):
        settings["env"] = dict(getattr(args, f"{flag}_env"))
    for key in ("cwd", "reruns", "timeout_s", "test_timeout_s"):
        if getattr(args, f"{flag}_{key}", None) is not None:
            settings[key] = getattr(args, f"{flag}_{key}")
    return settings


def command_given(args: argparse.Namespace, *, flag: str) -> bool:
    """``run --<flag> COMMAND`` gave the user's command."""
    return args.command == "run" and getattr(args, flag, None) is not None
