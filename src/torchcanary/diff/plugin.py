"""The diff section's entry in the section contract (registered in pyproject.toml).

The package is ``surface`` (what it compares); the section and its subcommand are ``diff``.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.package_section import PackageSection


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


SECTION = PackageSection(
    name="diff",
    package="torchcanary.diff",
    order=50,
    help="what changed in the build that the notes don't say, and where your code meets it",
    flags=add_flags,
    settings_from_flags=flag_settings,
)
