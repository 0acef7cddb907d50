"""The bench section's entry in the section contract (registered in pyproject.toml).

The package is ``measure``; the section, its config table and its subcommand are ``bench``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from torchcanary.contract import FromModule, Section

_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h`` as seconds; argparse turns the ValueError into usage."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write seconds or a number with s, m or h, e.g. 5m"
        )
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--budget",
        type=duration,
        metavar="DURATION",
        help="most time the bench may spend measuring, e.g. 5m; benchmarks still undecided "
        "then are judged on what they have (default: all groups)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        dest="bench_workloads",
        metavar="TARGET",
        help="also time your own step, e.g. 'myproject.bench:train_step' or "
        "'bench.py:infer_step': a function that sets up and returns the callable to time "
        '(repeatable; options in [[bench.benchmarks]] kind = "workload")',
    )
    if own_command:
        parser.add_argument(
            "--aa",
            action="store_true",
            help="A/A: the baseline against itself, "
            "to measure the false-alarm rate and minimum detectable effect",
        )
        # On ``run`` the stack's --with serves both sections.
        parser.add_argument(
            "--with",
            action="append",
            dest="bench_with",
            metavar="REQ",
            help="install this into a per-run overlay of both environments for your "
            "workloads, e.g. '-e .' (repeatable)",
        )
        parser.add_argument(
            "--nodes",
            type=int,
            help="with --fleet: the collectives family with one rank on each of this many "
            "Ray nodes (STRICT_SPREAD), algbw and busbw per op (see docs/fleet.md)",
        )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"aa": True} if getattr(args, "aa", False) else {}
    if getattr(args, "budget", None) is not None:
        settings["budget_s"] = args.budget
    if getattr(args, "bench_workloads", None):
        settings["workloads"] = list(args.bench_workloads)
    requirements = getattr(args, "bench_with", None) or getattr(args, "stack_with", None)
    if requirements:
        settings["with"] = list(requirements)
    return settings


class BenchSection(Section):
    """The bench section: each part is done by a module of the package, imported on
    first use (``FromModule``) so ``torchcanary --help`` stays fast."""

    name = "bench"
    order = 20
    help = "performance A/B only (interleaved, with CIs)"

    add_flags = staticmethod(add_flags)
    flag_settings = staticmethod(flag_settings)
    policy_defaults = FromModule("torchcanary.bench.section:POLICY_DEFAULTS")
    checked_verdicts = FromModule("torchcanary.bench.section:CHECKED_VERDICTS")
    outputs = FromModule("torchcanary.bench.section:outputs")
    policy_bounds = FromModule("torchcanary.bench.section:POLICY_BOUNDS")
    parse_settings = FromModule("torchcanary.bench.section:parse_settings")
    planned_units = FromModule("torchcanary.bench.section:planned_units")
    across_nodes = FromModule("torchcanary.bench.across_nodes:venue")
    run = FromModule("torchcanary.bench.section:run")
    record_from_json = FromModule("torchcanary.bench.result:from_json")
    load_view = FromModule("torchcanary.bench.view:load")
    stored_units = FromModule("torchcanary.bench.section:stored_units")
    blocking_reasons = FromModule("torchcanary.bench.section:blocking_reasons")
    findings = FromModule("torchcanary.bench.findings:findings")
    reproducible = FromModule("torchcanary.bench.repro:reproducible")
    html = FromModule("torchcanary.bench.report:html")
    markdown = FromModule("torchcanary.bench.report:markdown")
    junit_cases = FromModule("torchcanary.bench.report:junit_cases")
    reused = FromModule("torchcanary.bench.report:reused")
    compared = FromModule("torchcanary.bench.history:compared")
    worse_verdicts = FromModule("torchcanary.bench.history:WORSE_VERDICTS")
    history_plot = FromModule("torchcanary.bench.report:history_plot")


SECTION = BenchSection()
