"""The bench section's entry in the section contract (registered in pyproject.toml).

The package is ``measure``; the section, its config table and its subcommand are ``bench``.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.sections import PackageSection


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if own_command:
        parser.add_argument(
            "--aa",
            action="store_true",
            help="A/A: the baseline against itself, "
            "to measure the false-alarm rate and minimum detectable effect",
        )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"aa": True} if getattr(args, "aa", False) else {}


SECTION = PackageSection(
    name="bench",
    package="torchcanary.measure",
    order=20,
    help="performance A/B only (interleaved, with CIs)",
    flags=add_flags,
    settings_from_flags=flag_settings,
)
