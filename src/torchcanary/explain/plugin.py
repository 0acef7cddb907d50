"""The explain section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.explain.settings import MODES
from torchcanary.package_section import PackageSection


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--explain",
        dest="explain_mode",
        choices=MODES,
        help="explain each finding: off, quick (default: within a quarter of the run's time) "
        "or full (more repeats)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    mode = getattr(args, "explain_mode", None)
    return {"mode": mode} if mode else {}


SECTION = PackageSection(
    name="explain",
    package="torchcanary.explain",
    order=90,
    help=None,
    flags=add_flags,
    settings_from_flags=flag_settings,
)
