"""The diff section's entry in the section contract (registered in pyproject.toml).

The package is ``surface`` (what it compares); the section and its subcommand are ``diff``.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.contract import FromModule, Section


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
    """The diff section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "diff"
    order = 50
    help = "what changed in the build that the notes don't say, and where your code meets it"

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    policy_defaults = FromModule("torchcanary.diff.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.diff.section:CHECKED_VERDICTS")
    outputs = FromModule("torchcanary.diff.section:outputs")
    parse_settings = FromModule("torchcanary.diff.section:parse_settings")
    planned_units = FromModule("torchcanary.diff.section:planned_units")
    run = FromModule("torchcanary.diff.section:run")
    record_from_json = FromModule("torchcanary.diff.result:from_json")
    blocking_reasons = FromModule("torchcanary.diff.section:blocking_reasons")
    findings = FromModule("torchcanary.diff.findings:findings")
    html = FromModule("torchcanary.diff.report:html")
    markdown = FromModule("torchcanary.diff.report:markdown")
    junit_cases = FromModule("torchcanary.diff.report:junit_cases")
    reused = FromModule("torchcanary.diff.report:reused")


SECTION = DiffSection()
