"""``report`` and ``runs``: what a store already holds, rendered again or listed. Reading
commands never create a store.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.errors import EXIT_GO, CanaryError
from torchcanary.report_kit.listing import Listing, add_format_flags, show
from torchcanary.store.base import ResultStore
from torchcanary.store.location import is_postgres_url


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``report`` and ``runs``; their handlers."""
    report = commands.add_parser("report", help="render a stored run's outputs again")
    report.add_argument("run_id", metavar="RUN", help="run id, or 'latest'")
    add_result_flags(report, outputs=True)

    runs = commands.add_parser("runs", help="list the runs in a store")
    add_result_flags(runs, outputs=False)
    add_format_flags(runs)
    return {"report": _cmd_report, "runs": _cmd_runs}


def add_result_flags(parser: argparse.ArgumentParser, outputs: bool) -> None:
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


def existing_paths(args: argparse.Namespace) -> tuple[Path | str, Path]:
    """The store and report directory to read; reading commands never create a store."""
    from torchcanary.config import result_paths

    flags = {"store": args.store, "output": getattr(args, "output", None)}
    store, output = result_paths(args.config, flags, Path.cwd())
    if not is_postgres_url(store) and not Path(store).is_file():
        raise CanaryError(f"no store at {store}; pass --store PATH")
    return store, output


def resolve_run_id(store: ResultStore, given: str) -> str:
    """``given``, or the latest run's id for ``latest``."""
    if given != "latest":
        return given
    latest = store.latest_run()
    if latest is None:
        raise CanaryError(f"{store.location} holds no runs yet")
    return latest.run_id


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.report.render import write_outputs
    from torchcanary.report.view import load_run_view
    from torchcanary.store.location import open_store

    store_path, output = existing_paths(args)
    with open_store(store_path, create=False) as store:
        run_id = resolve_run_id(store, args.run_id)
        outputs = write_outputs(load_run_view(store, run_id), output)
    for kind, path in outputs.items():
        console.print(f"{kind:>8}: {path}", highlight=False)
    return EXIT_GO


def _cmd_runs(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.store.location import open_store

    store_path, _ = existing_paths(args)
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
