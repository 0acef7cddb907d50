"""The stack section's entry in the section contract (registered in pyproject.toml).

Its own subcommand takes the command as a positional; ``run`` takes it as ``--stack``, and
giving it there asks for the section even when ``--only`` leaves it out.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from torchcanary.contract import FromModule, Section
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
    """The stack section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "stack"
    order = 40
    help = "your own test suite or script under both versions"

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    named_by = staticmethod(named_by)
    missing_input = staticmethod(missing_input)
    policy_defaults = FromModule("torchcanary.stack.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.stack.section:CHECKED_VERDICTS")
    policy_choices = FromModule("torchcanary.stack.section:POLICY_CHOICES")
    policy_bounds = FromModule("torchcanary.stack.section:POLICY_BOUNDS")
    parse_settings = FromModule("torchcanary.stack.section:parse_settings")
    planned_units = FromModule("torchcanary.stack.section:planned_units")
    run = FromModule("torchcanary.stack.section:run")
    record_from_json = FromModule("torchcanary.stack.result:from_json")
    blocking_reasons = FromModule("torchcanary.stack.section:blocking_reasons")
    findings = FromModule("torchcanary.stack.findings:findings")
    reproducible = FromModule("torchcanary.stack.repro:reproducible")
    html = FromModule("torchcanary.stack.report:html")
    markdown = FromModule("torchcanary.stack.report:markdown")
    junit_cases = FromModule("torchcanary.stack.report:junit_cases")


SECTION = StackSection()
