"""The drill section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from torchcanary.contract import FromModule, Section


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    if not own_command:
        return  # `run` takes the drills from the config's [drill] table
    parser.add_argument(
        "--faults", help="comma-separated drills, e.g. 'kill:restart,hang:timeout', or 'all'"
    )
    parser.add_argument("--ranks", type=int, help="ranks per job (2 to 4)")
    parser.add_argument("--steps", type=int, help="training steps per job")
    parser.add_argument("--at-step", type=int, dest="at_step", help="step at which to inject")
    parser.add_argument(
        "--job",
        metavar="SCRIPT_AND_ARGS",
        help="drill your own script instead of the built-in job, e.g. 'train.py --config "
        "small.yaml' (started with torchrun --nproc-per-node; see docs/drills.md)",
    )
    parser.add_argument(
        "--with",
        action="append",
        dest="drill_with",
        metavar="REQ",
        help="install this into both environments for --job first, e.g. '-e .'",
    )
    parser.add_argument("--nproc", type=int, dest="ranks", help="ranks per job (as --ranks)")
    parser.add_argument(
        "--job-cwd", dest="job_cwd", metavar="DIR", help="the folder --job starts in"
    )
    parser.add_argument(
        "--job-env",
        action="append",
        dest="job_env",
        metavar="KEY=VALUE",
        help="a variable for --job (repeatable; replaces the config's job_env)",
    )
    parser.add_argument(
        "--fresh-reference",
        action="store_true",
        default=None,
        dest="job_fresh_reference",
        help="make the job's fault-free run again instead of reusing the one cached for "
        "the same job, files and environment",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        help="with --fleet: one rank on each of this many Ray nodes (STRICT_SPREAD), "
        "faults including node-kill (see docs/fleet.md)",
    )
    parser.add_argument(
        "--shared-dir",
        type=Path,
        dest="shared_dir",
        help="with --nodes: a folder every node sees, for the job's checkpoints "
        "(default: the output folder, which a cluster on one machine shares)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    faults = getattr(args, "faults", None)
    if faults:
        settings["faults"] = (
            "all" if faults == "all" else [p.strip() for p in faults.split(",") if p.strip()]
        )
    for key in ("ranks", "steps", "at_step", "job", "job_cwd", "job_env", "job_fresh_reference"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "drill_with", None):
        settings["job_with"] = list(args.drill_with)
    return settings


class DrillSection(Section):
    """The drill section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "drill"
    order = 30
    help = "fault drills on a distributed training job only"

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    policy_defaults = FromModule("torchcanary.drill.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.drill.section:CHECKED_VERDICTS")
    policy_bounds = FromModule("torchcanary.drill.section:POLICY_BOUNDS")
    parse_settings = FromModule("torchcanary.drill.section:parse_settings")
    planned_units = FromModule("torchcanary.drill.section:planned_units")
    across_nodes = FromModule("torchcanary.drill.across_nodes:venue")
    run = FromModule("torchcanary.drill.section:run")
    record_from_json = FromModule("torchcanary.drill.result:from_json")
    stored_units = FromModule("torchcanary.drill.section:stored_units")
    blocking_reasons = FromModule("torchcanary.drill.section:blocking_reasons")
    findings = FromModule("torchcanary.drill.findings:findings")
    reproducible = FromModule("torchcanary.drill.repro:reproducible")
    html = FromModule("torchcanary.drill.report:html")
    markdown = FromModule("torchcanary.drill.report:markdown")
    junit_cases = FromModule("torchcanary.drill.report:junit_cases")
    reused = FromModule("torchcanary.drill.report:reused")
    compared = FromModule("torchcanary.drill.history:compared")
    worse_verdicts = FromModule("torchcanary.drill.history:WORSE_VERDICTS")


SECTION = DrillSection()
