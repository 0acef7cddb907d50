"""The drill section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from torchcanary.package_section import PackageSection


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


SECTION = PackageSection(
    name="drill",
    package="torchcanary.drill",
    order=30,
    help="fault drills on a distributed training job only",
    flags=add_flags,
    settings_from_flags=flag_settings,
)
