"""The explain section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.contract import FromModule, Section
from torchcanary.explain.settings import MODES


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


class ExplainSection(Section):
    """The explain section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "explain"
    order = 90
    help = None

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    policy_defaults = FromModule("torchcanary.explain.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.explain.section:CHECKED_VERDICTS")
    parse_settings = FromModule("torchcanary.explain.section:parse_settings")
    planned_units = FromModule("torchcanary.explain.section:planned_units")
    run = FromModule("torchcanary.explain.section:run")
    record_from_json = FromModule("torchcanary.explain.result:from_json")
    blocking_reasons = FromModule("torchcanary.explain.section:blocking_reasons")
    html = FromModule("torchcanary.explain.report:html")
    markdown = FromModule("torchcanary.explain.report:markdown")
    junit_cases = FromModule("torchcanary.explain.report:junit_cases")
    json_parts = FromModule("torchcanary.explain.report:json_parts")
    compared = FromModule("torchcanary.explain.history:compared")


SECTION = ExplainSection()
