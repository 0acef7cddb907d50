"""The claims section's entry in the section contract (registered in pyproject.toml).

Claims has no subcommand of its own (``torchcanary run --only claims``): its flags are
``run``'s (``--probes``, ``--release``, ...; ``claims/settings.py``); its results are
probe results, stored apart from the other sections' rows (``result_table``) and read
through ``claims/view.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchcanary.claims.records import TABLE
from torchcanary.contract import FromModule, RunView, Section


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    """Which claims to probe, and how (on ``run``: the claims have no command of their own)."""
    parser.add_argument("--probes", help="comma-separated probe id patterns, e.g. 'c10d.*,nccl2.*'")
    parser.add_argument(
        "--probe-module",
        action="append",
        dest="probe_modules",
        help="extra module of probes to load (repeatable)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        dest="probe_timeout_s",
        help="seconds per probe, overriding each probe's own timeout",
    )
    parser.add_argument(
        "--release",
        help="claims pack to qualify against, e.g. 2.14 (default: the candidate's release)",
    )
    parser.add_argument(
        "--regression",
        action="append",
        metavar="RELEASE",
        help="also check an older release's pack, e.g. 2.13: do its claims still hold?",
    )
    parser.add_argument(
        "--fresh-claims",
        action="store_true",
        default=None,
        help="run every claim probe again instead of reusing the verdicts kept from earlier "
        "runs of the same environments on this machine (claims.reuse = false)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags given set in the claims table (flags win over the file)."""
    settings: dict[str, Any] = {}
    probes = [p.strip() for p in (getattr(args, "probes", None) or "").split(",") if p.strip()]
    if probes:
        settings["probes"] = probes
    for key in ("probe_modules", "probe_timeout_s", "release", "regression"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "fresh_claims", None):
        settings["reuse"] = False
    return settings


class ClaimsSection(Section):
    """The claims section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "claims"
    order = 10
    help = None
    result_table = TABLE

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    policy_defaults = FromModule("torchcanary.claims.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.claims.section:CHECKED_VERDICTS")
    outputs = FromModule("torchcanary.claims.section:outputs")
    policy_choices = FromModule("torchcanary.claims.section:POLICY_CHOICES")
    parse_settings = FromModule("torchcanary.claims.section:parse_settings")
    add_commands = FromModule("torchcanary.claims.commands:add_commands")
    planned_units = FromModule("torchcanary.claims.section:planned_units")
    check_plan = FromModule("torchcanary.claims.section:check_plan")
    worker_packages = FromModule("torchcanary.claims.section:worker_packages")
    fit_plan = FromModule("torchcanary.claims.fit:fit_plan")
    run = FromModule("torchcanary.claims.section:run")
    load_view = FromModule("torchcanary.claims.view:load")
    stored_units = FromModule("torchcanary.claims.section:stored_units")
    blocking_reasons = FromModule("torchcanary.claims.section:blocking_reasons")
    findings = FromModule("torchcanary.claims.findings:findings")
    reproducible = FromModule("torchcanary.claims.repro:reproducible")
    html = FromModule("torchcanary.claims.report:html")
    markdown = FromModule("torchcanary.claims.report:markdown")
    junit_cases = FromModule("torchcanary.claims.report:junit_cases")
    terminal = FromModule("torchcanary.claims.report:terminal")
    json_parts = FromModule("torchcanary.claims.report:json_parts")
    reused = FromModule("torchcanary.claims.report:reused")
    fleet_part = FromModule("torchcanary.claims.fleet:fleet_part")
    compared = FromModule("torchcanary.claims.history:compared")
    worse_verdicts = FromModule("torchcanary.claims.history:WORSE_VERDICTS")
    history = FromModule("torchcanary.claims.history:history")
    holds = FromModule("torchcanary.claims.history:holds")

    def has_results(self, view: RunView) -> bool:
        from torchcanary.claims.view import claims_of

        return bool(claims_of(view).probe_results)


SECTION = ClaimsSection()
