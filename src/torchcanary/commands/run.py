"""``run`` and each section's own command (``bench``, ``drill``, ...): their flags, the
plan they make, and the one driver they hand it to, here, on a fleet or across nodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.commands import EPILOG
from torchcanary.commands.summary import print_outcome, print_verdict
from torchcanary.errors import CanaryError, ConfigError
from torchcanary.plan import COMPANION_MODES, DEFAULT_BASELINE, DEFAULT_CANDIDATE, INSTALLERS
from torchcanary.sections import load_plan, registered, section_flags, section_names
from torchcanary.store.base import ResultStore

if TYPE_CHECKING:
    from torchcanary.config import Settings
    from torchcanary.fleet.executor import Executor
    from torchcanary.fleet.slurm_site import SlurmSite
    from torchcanary.hardware_profile import NodeSelection
    from torchcanary.runner import Venue


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``run`` and every section's own command; their handler."""
    run = commands.add_parser(
        "run",
        help="qualify a candidate against a baseline (all sections)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_flags(run)
    names = ", ".join(section_names())
    run.add_argument("--only", help=f"comma-separated sections to run ({names})")
    run.add_argument("--skip", help="comma-separated sections to leave out")
    run.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_ID",
        help="carry on an interrupted run (default: the latest unfinished one)",
    )
    handlers: dict[str, Handler] = {"run": _cmd_run}
    for section in registered().values():
        section_flags(section, run, own_command=False)
    for section in registered().values():  # each section with a subcommand of its own
        if section.help is not None:
            own = commands.add_parser(section.name, help=section.help, description=section.help)
            _add_run_flags(own)
            section_flags(section, own, own_command=True)
            handlers[section.name] = _cmd_run
    return handlers


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", help=f"pinned environment (default {DEFAULT_BASELINE})")
    parser.add_argument("--candidate", help=f"environment to qualify (default {DEFAULT_CANDIDATE})")
    parser.add_argument(
        "--config",
        type=Path,
        help="config file (default: ./canary.toml or [tool.torchcanary] in ./pyproject.toml)",
    )
    parser.add_argument(
        "--installer",
        choices=INSTALLERS,
        help="what fills a new environment (default auto: uv if installed, else pip); "
        "both use pip's index settings and build the same environment",
    )
    parser.add_argument(
        "--companions",
        choices=COMPANION_MODES,
        help="torchvision, torchaudio and the rest of the torch family: as-given (default) "
        "installs your pins as written, since a pin says what your team runs, and refuses "
        "before the run, naming the release to use, one made for another torch; auto "
        "installs the release made for each side's torch instead",
    )
    parser.add_argument("--policy", dest="policy_file", help="TOML policy file for go / no-go")
    parser.add_argument(
        "--store",
        help="SQLite file or postgresql://USER@HOST/DB (default canary-results/canary.db)",
    )
    parser.add_argument("--output", help="directory for reports (default canary-results)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    fleet = parser.add_argument_group("fleet (Ray needs torchcanary[ray]; Slurm its commands)")
    fleet.add_argument(
        "--fleet",
        metavar="ADDRESS",
        help="run on a cluster's nodes: Ray at ray://HEAD:10001, HOST:PORT or auto "
        "(RAY_ADDRESS), or Slurm as slurm[:PARTITION] from a login node",
    )
    fleet.add_argument(
        "--fleet-gpus",
        type=int,
        metavar="N",
        help="give each unit N of its node's GPUs (default: all of them; other accelerators: all)",
    )
    fleet.add_argument(
        "--fleet-mixed",
        action="store_true",
        help="with --nodes: run across nodes of different hardware profiles, filed under "
        "mixed:A,B (refused otherwise); with fewer GPU nodes than --nodes, the ranks run "
        "without GPUs",
    )
    fleet.add_argument(
        "--fleet-dir",
        type=Path,
        metavar="DIR",
        help="a folder every node sees at the same path (Slurm keeps its units' files there)",
    )
    fleet.add_argument(
        "--slurm-args",
        metavar="FLAGS",
        help='sbatch flags every Slurm job carries besides [fleet.slurm], e.g. "--comment=qa"',
    )
    fleet.add_argument(
        "--fleet-nodes",
        choices=("per-profile", "all"),
        default="per-profile",
        help="one node per hardware profile (default), or every node",
    )
    fleet.add_argument(
        "--fleet-select",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only nodes whose profile has this value, e.g. gpu_model='NVIDIA H100' (repeatable)",
    )


def _split(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text else None


def _sections_from(args: argparse.Namespace) -> list[str] | None:
    only, skip = _split(getattr(args, "only", None)), _split(getattr(args, "skip", None))
    known = section_names()
    for name in (only or []) + (skip or []):
        if name not in known:
            raise CanaryError(f"unknown section {name!r}; choose from {', '.join(known)}")
    if only is None and skip is None:
        return None
    return [s for s in (only or known) if s not in (skip or [])]


def _section_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {name: section.flag_settings(args) for name, section in registered().items()}


def _own_command_sections(command: str) -> list[str] | None:
    """A section's own subcommand runs that section alone."""
    section = registered().get(command)
    return [command] if section is not None and section.help is not None else None


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed command line as the flag layer of ``load_settings`` (flags win over files)."""
    sections = _own_command_sections(args.command) or _sections_from(args)
    named = list(_own_command_sections(args.command) or _split(getattr(args, "only", None)) or [])
    skipped = _split(getattr(args, "skip", None)) or []
    for name, section in registered().items():  # e.g. `run --stack CMD` asks for stack
        if section.named_by(args) and name not in skipped:  # --skip calls wins over --stack
            named.append(name)
            if sections and name not in sections:
                sections = [*sections, name]
    return {
        "baseline": args.baseline,
        "candidate": args.candidate,
        "installer": args.installer,
        "companions": args.companions,
        "policy_file": args.policy_file,
        "store": args.store,
        "output": args.output,
        "sections": sections,
        "named_sections": named,
        "section_overrides": _section_overrides(args),
    }


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    """A run here, with ``--fleet`` on a cluster's nodes (Ray or Slurm), or with ``--nodes``
    one rank on each of N nodes; ``--resume`` goes back to wherever the run was made (the
    fleet it recorded, unless ``--fleet`` names another). One driver runs them all.

    Without ``--fleet`` nothing of the fleet is imported (and Ray never is). With it, the
    fleet is reached before the store is opened: an address that cannot be used is one
    line and exit 2, with no run (or store) left half-made.
    """
    from torchcanary.config import load_settings
    from torchcanary.progress import Progress
    from torchcanary.runner import execute
    from torchcanary.store.location import open_store

    settings = load_settings(args.config, flags_from_args(args), Path.cwd())
    executor, venue = _venue(args, settings)
    progress = Progress(quiet=args.quiet)
    if not getattr(args, "resume", None):  # a resumed run follows its stored plan instead
        for section, why in settings.left_out.items():
            progress.note(f"{section}: left out of this run: {why}")
    try:
        with open_store(settings.store) as store:
            plan, resume_id = settings.plan, None
            if getattr(args, "resume", None):
                previous = _run_to_resume(store, args.resume)
                plan, resume_id = load_plan(previous.plan), previous.run_id
                if venue is None:
                    executor, venue = _stored_fleet(store, resume_id, args, settings)
            outcome = execute(plan, store, settings.output, progress, venue, resume_id)
            print_outcome(console, store, outcome.run_id)
    finally:
        if executor is not None:
            executor.close()
    return print_verdict(
        console, outcome.decision, outcome.outputs, outcome.failures, outcome.citation
    )


def _selection(args: argparse.Namespace) -> NodeSelection:
    from torchcanary.hardware_profile import NodeSelection

    return NodeSelection.parse("all" if args.fleet_nodes == "all" else "profile", args.fleet_select)


def _slurm_site(
    args: argparse.Namespace, settings: Settings, address: str | None
) -> SlurmSite | None:
    """The site flags for a Slurm fleet: ``[fleet.slurm]`` and then ``--slurm-args``;
    None for another engine (where ``--slurm-args`` is a usage error)."""
    from torchcanary.fleet.connect import SLURM, engine_of

    given = getattr(args, "slurm_args", None)
    if address is None or engine_of(address) != SLURM:
        if given:
            raise ConfigError("--slurm-args needs a Slurm fleet: add --fleet slurm[:PARTITION]")
        return None
    if not given:
        return settings.slurm_site
    from dataclasses import replace

    from torchcanary.fleet.slurm_site import SlurmSite, parse_site

    base = settings.slurm_site or SlurmSite()
    return replace(base, extra=(*base.extra, *parse_site({}, given).extra))


def _venue(
    args: argparse.Namespace, settings: Settings
) -> tuple[Executor, Venue] | tuple[None, None]:
    """Where the flags ask the run to be carried out, as (executor, venue); (None, None)
    for this machine. The fleet is connected to here, before any store is opened."""
    plan = settings.plan
    selection = _selection(args)
    nodes = getattr(args, "nodes", None)
    if nodes is not None:
        from torchcanary.fleet.across_nodes import across_nodes, check_across_nodes, gpus_across
        from torchcanary.fleet.connect import connect_fleet

        address = check_across_nodes(args.fleet, nodes, args.command)
        # Before the store: an unusable address is exit 2.
        site = _slurm_site(args, settings, address)
        fleet = connect_fleet(address, fleet_dir=args.fleet_dir, slurm_site=site)
        try:
            gpus = gpus_across(fleet.discover(), nodes, args.fleet_gpus, args.fleet_mixed)
            fleet.require_nodes(nodes, gpus)
            shared_dir = getattr(args, "shared_dir", None)
            venue = across_nodes(
                plan, fleet, address, nodes, shared_dir, gpus=gpus, mixed=args.fleet_mixed
            )
        except BaseException:
            fleet.close()
            raise
        return fleet, venue
    if args.fleet:
        from torchcanary.fleet import driver

        request = driver.FleetRequest(
            args.fleet,
            selection,
            fleet_dir=args.fleet_dir,
            gpus=args.fleet_gpus,
            slurm_site=_slurm_site(args, settings, args.fleet),
        )
        executor = driver.connect_fleet(request)
        return executor, driver.FleetRun(executor, request)
    _slurm_site(args, settings, None)  # --slurm-args without a fleet: one line, exit 2
    return None, None


def _stored_fleet(
    store: ResultStore, run_id: str, args: argparse.Namespace, settings: Settings
) -> tuple[Executor, Venue] | tuple[None, None]:
    """The executor and venue to resume ``run_id`` on its fleet; (None, None) for a local run."""
    from torchcanary.fleet import driver

    stored = driver.stored_fleet(store, run_id)
    if stored is None:
        return None, None
    gpus = args.fleet_gpus if args.fleet_gpus is not None else stored.get("gpus")
    site = _slurm_site(args, settings, stored["address"])
    if site is None and stored.get("slurm_site"):
        # The flags the run's jobs carried: a resumed unit gets the same time limit.
        from torchcanary.fleet.slurm_site import SlurmSite

        site = SlurmSite.from_json(stored["slurm_site"])
    request = driver.FleetRequest(
        stored["address"], _selection(args), fleet_dir=args.fleet_dir, gpus=gpus, slurm_site=site
    )
    executor = driver.connect_fleet(request)
    return executor, driver.FleetRun(executor, request)


def _run_to_resume(store: ResultStore, wanted: str) -> Any:
    previous = (
        store.latest_run(status="interrupted") or store.latest_run("running")
        if wanted == "latest"
        else store.run(wanted)
    )
    if previous is None:
        raise CanaryError(f"nothing to resume in {store.location}; start a run without --resume")
    return previous
