"""The command line of the cross-run questions: ``history``, ``compare`` and ``store``.

Each command registers its own flags here and turns them into keyword arguments at this
boundary; ``cli.py`` only adds these parsers and routes to ``HANDLERS``.
"""

from __future__ import annotations

import argparse
import calendar
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.errors import EXIT_GO, CanaryError
from torchcanary.report_kit.listing import Listing, add_format_flags, show
from torchcanary.sections import get_section, holds_item, item_history, registered, section_names
from torchcanary.store.base import ResultStore
from torchcanary.store.location import open_store, store_location

STORE_HELP = "SQLite file or postgresql://USER@HOST/DB (default: the config's store, else "
STORE_HELP += "canary-results/canary.db)"


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``history``, ``compare`` and ``store`` to the CLI's subparsers; their handlers."""
    names = section_names()
    history = commands.add_parser("history", help="one result id's verdicts across runs")
    history.add_argument(
        "item", metavar="ID", help=f"a result id of any section ({', '.join(names)})"
    )
    history.add_argument("--section", choices=names)
    history.add_argument("--baseline", help="only runs whose baseline torch/spec contains this")
    history.add_argument("--candidate", help="only runs whose candidate torch/spec contains this")
    history.add_argument("--since", type=_date, help="only runs from this UTC date (YYYY-MM-DD)")
    history.add_argument("--until", type=_date, help="only runs before this UTC date")
    history.add_argument("--last", type=int, metavar="N", help="only the most recent N runs")
    history.add_argument(
        "--profile",
        help="only results from this fleet hardware profile (as `run --fleet` stored them)",
    )
    history.add_argument("--plot", type=Path, help="SVG file to draw (default canary-results/)")
    add_format_flags(history)
    history.add_argument("--store", help=STORE_HELP)

    compare = commands.add_parser("compare", help="what changed between two runs")
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    add_format_flags(compare)
    compare.add_argument("--store", help=STORE_HELP)

    store = commands.add_parser("store", help="bring a store's schema forward, or copy a store")
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    migrate = actions.add_parser("migrate", help="create or bring the store to this schema")
    migrate.add_argument("--store", help=STORE_HELP)
    copy = actions.add_parser("copy", help="copy every run of SRC into DST (created if new)")
    copy.add_argument("source", metavar="SRC", help="SQLite file or postgresql:// URL")
    copy.add_argument("target", metavar="DST", help="SQLite file or postgresql:// URL")
    return {"history": _cmd_history, "compare": _cmd_compare, "store": _cmd_store}


def _date(text: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%d")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-30") from None


def default_store(given: str | None, cwd: Path) -> str:
    """``--store``, else the config file's ``store``, else the embedded default."""
    from torchcanary.config import result_paths

    return str(result_paths(None, {"store": given}, cwd)[0])


def _cmd_history(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.history.render import plot, ratio_text, when
    from torchcanary.store.history import HistoryFilter

    run_filter = HistoryFilter(
        args.baseline, args.candidate, args.since, args.until, args.last, args.profile
    )
    with open_store(default_store(args.store, Path.cwd()), create=False) as store:
        section = args.section or find_section(store, args.item)
        entries = item_history(get_section(section), store, args.item, run_filter)
        location = store.location
    profiled = any(entry.profile for entry in entries)  # a column only when the fleet ran it
    columns = ("run", *(("profile",) if profiled else ()), "when (UTC)", "baseline", "candidate")
    rows = [
        (
            entry.run_id,
            *((entry.profile or "-",) if profiled else ()),
            when(entry),
            entry.baseline,
            entry.candidate,
            entry.verdict,
            ratio_text(entry),
        )
        for entry in entries
    ]
    listing = Listing(
        f"{args.item} ({section}) in {location}: {len(entries)} runs",
        (*columns, "verdict", "ratio [interval]"),
        rows,
        ids=("run",),
    )
    show(console, listing, args.format, lambda: [asdict(e) for e in entries])
    if args.format != "table":  # a script reads the rows; the plot is drawn for people
        return EXIT_GO
    plot_path = args.plot or Path("canary-results") / f"history-{_file_name(args.item)}.svg"
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    plot_path.write_text(plot(args.item, section, entries))
    console.print(f"    plot: {plot_path}", highlight=False)
    return EXIT_GO


def find_section(store: ResultStore, item: str) -> str:
    """The one registered section that has results for ``item``; several or none is a
    usage error."""
    found = [name for name, section in registered().items() if holds_item(section, store, item)]
    if not found:
        raise CanaryError(
            f"no result {item!r} in any section ({', '.join(registered())}) of "
            f"{store.location}; `torchcanary report RUN` shows a run's ids"
        )
    if len(found) > 1:
        raise CanaryError(f"{item!r} is in {' and '.join(found)}; pick one with --section")
    return found[0]


def _file_name(item: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", item).strip("._") or "item"


def _cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.history.compare import compare_runs, for_the_worse

    with open_store(default_store(args.store, Path.cwd()), create=False) as store:
        found = compare_runs(store, args.run_a, args.run_b)
    # Fleet runs are compared per hardware profile; the column appears when one is involved.
    profiled = any(change.profile for change in found.changes)
    columns = ("section", "item", found.run_a, found.run_b, "detail")
    rows = []
    for change in found.changes:
        row = (change.section, change.item, change.before, change.after, change.detail)
        rows.append((change.profile, *row) if profiled else row)
    listing = Listing(
        f"{found.run_a} -> {found.run_b}",
        ("profile", *columns) if profiled else columns,
        rows,
        ids=("item",),
    )
    show(console, listing, args.format, lambda: asdict(found))
    if args.format != "table":
        return EXIT_GO
    # Which changes are for the worse (the sections' worse_verdicts); said only where
    # something changed, so a comparison without changes prints as it always has.
    worse = sum(for_the_worse(change) for change in found.changes)
    direction = f" ({worse} for the worse)" if found.changes else ""
    console.print(
        f"decision: {found.decision_a} -> {found.decision_b}; {len(found.changes)} changed"
        f"{direction}, {found.unchanged} unchanged",
        highlight=False,
    )
    return EXIT_GO


def _cmd_store(args: argparse.Namespace, console: Console) -> int:
    if args.store_action == "migrate":
        with open_store(default_store(args.store, Path.cwd())) as store:
            console.print(
                f"{store.location}: schema version {store.schema_version}", highlight=False
            )
        return EXIT_GO
    from torchcanary.store.copy import copy_store

    if _same_store(args.source, args.target):
        raise CanaryError("SRC and DST are the same store; name two different stores")
    with (
        open_store(args.source, create=False) as source,
        open_store(args.target) as target,
    ):
        copied = copy_store(source, target)
        console.print(
            f"copied {copied['runs']} runs ({sum(copied.values())} rows) from "
            f"{source.location} to {target.location}",
            highlight=False,
        )
    return EXIT_GO


def _same_store(source: str, target: str) -> bool:
    first, second = (store_location(text, Path.cwd()) for text in (source, target))
    if isinstance(first, str) or isinstance(second, str):
        return first == second
    return first.resolve() == second.resolve()
