"""The command line. Parses flags, hands a plan to the runner, prints, and picks the exit code.

Exit codes: 0 go, 1 no-go, 2 usage or configuration error, 3 internal error (a section
could not finish, or a bug: the traceback is shown with --debug).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markdown import Markdown

from torchcanary import __version__
from torchcanary.errors import (
    EXIT_GO,
    EXIT_INTERNAL,
    EXIT_NO_GO,
    EXIT_USAGE,
    CanaryError,
    ConfigError,
)
from torchcanary.history import commands as history_commands
from torchcanary.plan import DEFAULT_BASELINE, DEFAULT_CANDIDATE, INSTALLERS
from torchcanary.report.listing import Listing, add_format_flags, show
from torchcanary.sections import (
    SectionDiscoveryError,
    registered,
    section_names,
    terminal_summary,
)
from torchcanary.store.base import ResultStore
from torchcanary.store.location import is_postgres_url
from torchcanary.store.redaction import redact

if TYPE_CHECKING:
    from torchcanary.policy import Decision

EPILOG = """\
examples:
  torchcanary run --baseline torch==2.13.0 --candidate torch==2.14.1
  torchcanary run --candidate "torch==2.14.1 numpy" --only claims --probes 'c10d.*'
  torchcanary run --resume                   # carry on after an interruption
  torchcanary probes                          # every claim probe and what it needs
  torchcanary packs                           # the claims packs installed, one per release
  torchcanary claims checklist NOTES.md --release 2.15   # draft a pack from the notes
  torchcanary runs && torchcanary report RUN_ID

environments (--baseline/--candidate): pip requirements ('torch==2.13.0 numpy'), an
interpreter ('python:/opt/venv/bin/python') or 'current'. Requirement sets are built once
into a cache (TORCHCANARY_CACHE, default the user cache dir) and reused.
configuration: [tool.torchcanary] in pyproject.toml or canary.toml; flags win.
exit codes: 0 go, 1 no-go, 2 usage/configuration error, 3 internal error.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"torchcanary: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


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
    parser.add_argument("--policy", dest="policy_file", help="TOML policy file for go / no-go")
    parser.add_argument(
        "--store",
        help="SQLite file or postgresql://USER@HOST/DB (default canary-results/canary.db)",
    )
    parser.add_argument("--output", help="directory for reports (default canary-results)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    fleet = parser.add_argument_group("fleet (needs torchcanary[ray])")
    fleet.add_argument(
        "--fleet",
        metavar="ADDRESS",
        help="run on a Ray cluster's nodes: ray://HEAD:10001, HOST:PORT, or auto (RAY_ADDRESS)",
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


def _add_claims_flags(parser: argparse.ArgumentParser) -> None:
    """Which claims to probe: only ``run`` runs claims, so only ``run`` takes these."""
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torchcanary",
        description="Qualify a PyTorch release on your own "
        "hardware before you roll it out: every claim probed, performance A/B, "
        "your own tests, and fault drills, with a go / no-go verdict.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"torchcanary {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="qualify a candidate against a baseline (all sections)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_flags(run)
    _add_claims_flags(run)
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
    for section in registered().values():
        section.add_flags(run, own_command=False)
    for section in registered().values():  # each section with a subcommand of its own
        if section.help is not None:
            own = commands.add_parser(section.name, help=section.help, description=section.help)
            _add_run_flags(own)
            section.add_flags(own, own_command=True)

    probes = commands.add_parser("probes", help="list every claim probe and its requirements")
    probes.add_argument("--probe-module", action="append", dest="probe_modules")
    add_format_flags(probes)

    packs = commands.add_parser("packs", help="list the claims packs installed (one per release)")
    add_format_flags(packs)

    claims = commands.add_parser("claims", help="work with release notes and claims packs")
    claims_commands = claims.add_subparsers(
        dest="claims_command", metavar="COMMAND", parser_class=_Parser, required=True
    )
    checklist = claims_commands.add_parser(
        "checklist", help="draft a pack from a release-notes text: a claim per sentence"
    )
    checklist.add_argument("notes", type=Path, metavar="NOTES", help="notes saved as .md or .txt")
    checklist.add_argument("--release", required=True, help="the release the notes are for")
    checklist.add_argument(
        "--output", type=Path, help="where to write the draft pack.json (default pack-RELEASE.json)"
    )

    report = commands.add_parser("report", help="render a stored run's outputs again")
    report.add_argument("run_id", metavar="RUN", help="run id, or 'latest'")
    _add_result_flags(report, outputs=True)

    runs = commands.add_parser("runs", help="list the runs in a store")
    _add_result_flags(runs, outputs=False)
    add_format_flags(runs)
    HISTORY_COMMANDS.update(history_commands.register(commands))  # history, compare, store
    return parser


def _add_result_flags(parser: argparse.ArgumentParser, outputs: bool) -> None:
    """Where stored results are: flags, else the config file's store/output, else defaults."""
    parser.add_argument("--config", type=Path, help="config file whose store (and output) to use")
    parser.add_argument(
        "--store",
        help="SQLite file or postgresql://USER@HOST/DB "
        "(default: the config's, else canary-results/canary.db)",
    )
    if outputs:
        parser.add_argument(
            "--output", help="directory for reports (default: the config's, else canary-results)"
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
    for name, section in registered().items():  # e.g. `run --stack CMD` asks for stack
        if section.named_by(args):
            named.append(name)
            if sections and name not in sections:
                sections = [*sections, name]
    return {
        "baseline": args.baseline,
        "candidate": args.candidate,
        "probes": _split(getattr(args, "probes", None)),
        "probe_modules": getattr(args, "probe_modules", None),
        "probe_timeout_s": getattr(args, "probe_timeout_s", None),
        "release": getattr(args, "release", None),
        "regression": getattr(args, "regression", None),
        "installer": args.installer,
        "policy_file": args.policy_file,
        "store": args.store,
        "output": args.output,
        "sections": sections,
        "named_sections": named,
        "section_overrides": _section_overrides(args),
    }


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    """A run here, or with ``--fleet`` on a Ray cluster's nodes; ``--resume`` goes back to
    wherever the run was made (the fleet it recorded, unless ``--fleet`` names another).

    Without ``--fleet`` nothing of the fleet is imported (and Ray never is). With it, the
    fleet is reached before the store is opened: an address that cannot be used is one
    line and exit 2, with no run (or store) left half-made.
    """
    from torchcanary.config import load_settings
    from torchcanary.fleet.profile import NodeSelection
    from torchcanary.plan import RunPlan
    from torchcanary.progress import Progress
    from torchcanary.runner import execute
    from torchcanary.store.location import open_store

    settings = load_settings(args.config, flags_from_args(args), Path.cwd())
    selection = NodeSelection.parse(
        "all" if args.fleet_nodes == "all" else "profile", args.fleet_select
    )
    nodes = getattr(args, "nodes", None)
    if nodes is not None:
        return _cmd_across_nodes(args, console, settings, nodes)
    request, executor = None, None
    if args.fleet:
        from torchcanary.fleet import driver

        request = driver.FleetRequest(args.fleet, selection)
        executor = driver.connect_fleet(request)
    progress = Progress(quiet=args.quiet)
    if not getattr(args, "resume", None):  # a resumed run follows its stored plan instead
        for section, why in settings.left_out.items():
            progress.note(f"{section}: left out of this run: {why}")
    try:
        with open_store(settings.store) as store:
            plan, resume_id = settings.plan, None
            if getattr(args, "resume", None):
                previous = _run_to_resume(store, args.resume)
                plan, resume_id = RunPlan.from_json(previous.plan), previous.run_id
                if executor is None:
                    request, executor = _stored_fleet(store, resume_id, selection)
            if executor is None or request is None:  # a run made on this machine
                outcome = execute(plan, store, settings.output, progress, resume_run_id=resume_id)
                _print_summary(console, store, outcome.run_id)
                _print_time(console, store, outcome.run_id)
                failures, decision = outcome.section_failures, outcome.decision
                outputs = outcome.outputs
            else:
                from torchcanary.fleet import driver

                fleet_outcome = driver.execute_on_fleet(
                    plan, store, settings.output, progress, executor, request, resume_id
                )
                _print_fleet_summary(console, store, fleet_outcome.run_id)
                failures, decision = fleet_outcome.unit_failures, fleet_outcome.decision
                outputs = fleet_outcome.outputs
    finally:
        if executor is not None:
            executor.close()
    return _print_verdict(console, decision, outputs, failures)


def _cmd_across_nodes(args: argparse.Namespace, console: Console, settings: Any, nodes: int) -> int:
    """``drill`` or ``bench`` with ``--fleet ADDR --nodes N``: one rank on each of N Ray nodes."""
    what = "a bench" if args.command == "bench" else "a drill"
    if not args.fleet:
        raise ConfigError(
            f"--nodes {nodes} places ranks on Ray nodes: add --fleet ADDRESS "
            "(ray://HEAD:10001, HOST:PORT or auto)"
        )
    if nodes < 2:
        raise ConfigError(f"--nodes {nodes}: {what} across nodes needs at least 2")
    from torchcanary.fleet.drill_run import execute_node_drills
    from torchcanary.fleet.node_bench import execute_node_bench
    from torchcanary.fleet.ray_executor import connect
    from torchcanary.progress import Progress
    from torchcanary.store.location import open_store

    executor = connect(args.fleet)  # before the store: an unusable address is exit 2
    try:
        executor.require_nodes(nodes)
        with open_store(settings.store) as store:
            progress = Progress(quiet=args.quiet)
            if args.command == "bench":
                outcome: Any = execute_node_bench(
                    settings.plan, store, settings.output, progress, executor, args.fleet, nodes
                )
            else:
                outcome = execute_node_drills(
                    settings.plan,
                    store,
                    settings.output,
                    progress,
                    executor,
                    args.fleet,
                    nodes,
                    shared_dir=getattr(args, "shared_dir", None),
                )
            # A bench across nodes stores its rows under the nodes' profile.
            profiles = store.run_profiles(outcome.run_id).items()
            for scoped in [store.scoped(node, profile) for profile, node in profiles] or [store]:
                _print_summary(console, scoped, outcome.run_id)
    finally:
        executor.close()
    return _print_verdict(console, outcome.decision, outcome.outputs, {})


def _print_verdict(
    console: Console, decision: Decision, outputs: dict[str, Path], failures: dict[str, str]
) -> int:
    """The report's files, then the last lines a reader sees: the verdict, why, and where
    the report is; and the exit code that says the same (a no-go exit is not a crash)."""
    for kind, path in outputs.items():
        console.print(f"{kind:>8}: {path}", highlight=False)
    if failures:
        code = EXIT_INTERNAL
        broken = [f"{unit} could not finish: {error}" for unit, error in failures.items()]
        verdict = f"none (exit {code}): {_first_of(broken, 'failure')}"
    elif decision.go and decision.warnings:
        # A go the policy let through with warnings must not read as a clean go.
        code = EXIT_GO
        verdict = f"go (exit {code}) with warnings: {_first_of(decision.warnings, 'warning')}"
    elif decision.go:
        code, verdict = EXIT_GO, f"go (exit {EXIT_GO}): no policy objected"
    else:
        code = EXIT_NO_GO
        verdict = f"no-go (exit {code}): {_first_of(decision.reasons, 'reason')}"
    console.print(f"verdict: {verdict}", markup=False, highlight=False, soft_wrap=True)
    report = outputs.get("html") or next(iter(outputs.values()), None)
    if report is not None:
        console.print(f"  report: {report}", markup=False, highlight=False, soft_wrap=True)
    return code


def _first_of(items: Sequence[str], noun: str) -> str:
    """The first of ``items``, and how many more are listed above."""
    if not items:
        return "see the report"
    more = len(items) - 1
    return items[0] + (f" (and {more} more {noun}{'s' * (more > 1)} above)" if more > 0 else "")


def _stored_fleet(store: ResultStore, run_id: str, selection: Any) -> tuple[Any, Any]:
    """The fleet request and executor to resume ``run_id`` on; (None, None) for a local run."""
    from torchcanary.fleet import driver

    stored = driver.stored_fleet(store, run_id)
    if stored is None:
        return None, None
    request = driver.FleetRequest(stored["address"], selection)
    return request, driver.connect_fleet(request)


def _run_to_resume(store: ResultStore, wanted: str) -> Any:
    previous = (
        store.latest_run(status="interrupted") or store.latest_run("running")
        if wanted == "latest"
        else store.run(wanted)
    )
    if previous is None:
        raise CanaryError(f"nothing to resume in {store.location}; start a run without --resume")
    return previous


def _print_fleet_summary(console: Console, store: ResultStore, run_id: str) -> None:
    from torchcanary.report.fleet import fleet_parts
    from torchcanary.report.view import load_run_view

    view = load_run_view(store, run_id)
    profiles = list(view.profiles)
    # Each section's own side-by-side of the profiles (the claims: a claim x profile table).
    for part in fleet_parts(view).values():
        for renderable in part.terminal:
            console.print(renderable)
    detail = view.run.decision_detail or {}
    colour = "green" if view.run.decision == "go" else "red"
    console.print(
        f"decision across {len(profiles)} profiles: [bold {colour}]{view.run.decision}[/]"
    )
    for reason in detail.get("reasons", []):
        console.print(f"  - {reason}", markup=False, highlight=False)
    for warning in detail.get("warnings", []):
        console.print(f"  - warning: {warning}", markup=False, highlight=False)


def _print_summary(console: Console, store: ResultStore, run_id: str) -> None:
    from torchcanary.report.view import load_run_view

    view = load_run_view(store, run_id)
    # Each section prints its own part: its terminal rendering where it has one (the claims'
    # table), else its Markdown summary.
    for name in view.run.plan.get("sections", ()):
        section = registered().get(name)
        if section is None:
            continue  # a plugin since removed: `torchcanary report` still has its rows
        parts = terminal_summary(section, view)
        for part in [Markdown(section.markdown(view))] if parts is None else parts:
            console.print(part)
    confounds = view.confounds()
    if confounds:
        console.print(
            "[yellow]confounds:[/] "
            + "; ".join(f"{k}: {b} vs {c}" for k, (b, c) in confounds.items()),
            highlight=False,
        )
    detail = view.run.decision_detail or {}
    colour = "green" if view.run.decision == "go" else "red"
    console.print(f"decision: [bold {colour}]{view.run.decision}[/]")
    for reason in detail.get("reasons", []):
        console.print(f"  - {reason}", markup=False, highlight=False)
    for warning in detail.get("warnings", []):
        console.print(f"  - warning: {warning}", markup=False, highlight=False)


def _print_time(console: Console, store: ResultStore, run_id: str) -> None:
    """Where the run's time went and what it kept from earlier runs (as summary.md says)."""
    from torchcanary.report.markdown import time_lines
    from torchcanary.report.view import load_run_view

    for line in time_lines(load_run_view(store, run_id)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _cmd_probes(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.claims.catalog import select_probes

    found = select_probes((), tuple(args.probe_modules or ()))
    described = [probe.describe() | {"plugin": source.plugin} for probe, source in found.values()]
    columns = ("id", "scope", "needs", "claim")
    rows = [tuple(str(item[c]) for c in columns) for item in described]
    listing = Listing(f"{len(described)} probes", columns, rows, ids=("id",))
    show(console, listing, args.format, lambda: described)
    return EXIT_GO


def _cmd_packs(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.packs.discovery import discover_packs

    described = [
        {
            "name": item.pack.name,
            "release": item.pack.release,
            "title": item.pack.title,
            "module": item.pack.module,
            "claims": len(item.pack.claims),
            "unprobed": sum(1 for claim in item.pack.claims if not claim.probes),
            "probes": len(item.probes),
            "notes_sha256": item.pack.notes_sha256,
        }
        for item in discover_packs()
    ]
    columns = ("name", "release", "claims", "unprobed", "probes", "title")
    rows = [tuple(str(item[c]) for c in columns) for item in described]
    listing = Listing(f"{len(described)} packs", columns, rows, ids=("name",))
    show(console, listing, args.format, lambda: described)
    return EXIT_GO


def _cmd_claims(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.claims.catalog import select_probes
    from torchcanary.packs.checklist import draft_pack

    if not args.notes.is_file():
        raise CanaryError(f"no notes file at {args.notes}; save the release notes as text first")
    probes = [probe for probe, _ in select_probes(()).values()]
    draft = draft_pack(args.notes, args.release, probes)
    output = args.output or Path(f"pack-{args.release}.json")
    output.write_text(json.dumps(draft.to_json(), indent=2, ensure_ascii=False) + "\n")
    probed = sum(1 for claim in draft.claims if claim.probes)
    console.print(
        f"{len(draft.claims)} claims in {args.notes.name}: {probed} matched to probes, "
        f"{len(draft.claims) - probed} unprobed; draft pack written to {output}",
        highlight=False,
    )
    return EXIT_GO


def _existing_paths(args: argparse.Namespace) -> tuple[Path | str, Path]:
    """The store and report directory to read; reading commands never create a store."""
    from torchcanary.config import result_paths

    flags = {"store": args.store, "output": getattr(args, "output", None)}
    store, output = result_paths(args.config, flags, Path.cwd())
    if not is_postgres_url(store) and not Path(store).is_file():
        raise CanaryError(f"no store at {store}; pass --store PATH")
    return store, output


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.report.render import write_outputs
    from torchcanary.report.view import load_run_view
    from torchcanary.store.location import open_store

    store_path, output = _existing_paths(args)
    with open_store(store_path, create=False) as store:
        run_id = args.run_id
        if run_id == "latest":
            latest = store.latest_run()
            if latest is None:
                raise CanaryError(f"{store.location} holds no runs yet")
            run_id = latest.run_id
        outputs = write_outputs(load_run_view(store, run_id), output)
    for kind, path in outputs.items():
        console.print(f"{kind:>8}: {path}", highlight=False)
    return EXIT_GO


def _cmd_runs(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.store.location import open_store

    store_path, _ = _existing_paths(args)
    with open_store(store_path, create=False) as store:
        runs = store.runs()
        title = store.location
    found = [
        {
            "run_id": run.run_id,
            "status": run.status,
            "decision": run.decision,
            "baseline": run.plan.get("baseline", ""),
            "candidate": run.plan.get("candidate", ""),
            "sections": list(run.plan.get("sections", [])),
            "created_at": run.created_at,
        }
        for run in runs
    ]
    rows = [
        (
            run["run_id"],
            run["status"],
            run["decision"] or "-",
            run["baseline"],
            run["candidate"],
            ",".join(run["sections"]),
        )
        for run in found
    ]
    columns = ("run", "status", "decision", "baseline", "candidate", "sections")
    show(console, Listing(title, columns, rows, ids=("run",)), args.format, lambda: found)
    return EXIT_GO


HISTORY_COMMANDS: dict[str, history_commands.Handler] = {}

COMMANDS = {
    "run": _cmd_run,
    "probes": _cmd_probes,
    "packs": _cmd_packs,
    "claims": _cmd_claims,
    "report": _cmd_report,
    "runs": _cmd_runs,
}


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()  # finds the installed sections: a broken plugin fails here
    except SectionDiscoveryError as exc:
        if "--debug" in words:
            raise
        print(
            f"torchcanary: error: {exc}; fix or uninstall that package (--debug: traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    console = Console()
    try:
        handler = (COMMANDS | HISTORY_COMMANDS).get(args.command, _cmd_run)  # else a section's
        return handler(args, console)
    except CanaryError as exc:
        print(f"torchcanary: error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "torchcanary: interrupted; finished results are stored: resume with "
            "`torchcanary run --resume`",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"torchcanary: internal error: {type(exc).__name__}: {redact(str(exc))} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
