"""The stack section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the command as a positional; ``run`` takes it as ``--stack``, and
giving it there asks for the section even when ``--only`` leaves it out.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from torchcanary.package_section import PackageSection
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
