"""How a listing command (runs, history, compare, probes, packs) prints its rows.

People get a rich table whose id columns are never cut or folded: a run id or a result id
is what a user copies into the next command (``report``, ``compare``, ``history``), at any
terminal width and in a pipe. Scripts get ``--format plain`` (a line per row, its cells
tab-separated in the table's column order, nothing else) or ``--format json`` (the
command's own JSON form).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

FORMATS = ("table", "plain", "json")


@dataclass(frozen=True)
class Listing:
    """A listing's rows as text; ``ids`` names the columns a reader copies whole."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    ids: tuple[str, ...] = ()


def add_format_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default), plain (a tab-separated line per row, for scripts) or json",
    )
    parser.add_argument(
        "--json", dest="format", action="store_const", const="json", help="--format json"
    )


def show(console: Console, listing: Listing, form: str, as_json: Callable[[], Any]) -> None:
    """Print ``listing`` in ``form``; ``as_json`` gives the command's JSON form when asked."""
    if form == "json":
        print(json.dumps(as_json(), indent=2))
    elif form == "plain":
        for row in listing.rows:
            print("\t".join(" ".join(cell.split()) for cell in row))
    else:
        console.print(_table(listing))


def _table(listing: Listing) -> Table:
    table = Table(title=listing.title)
    for index, column in enumerate(listing.columns):
        if column in listing.ids:
            widest = max((len(row[index]) for row in listing.rows), default=len(column))
            table.add_column(column, no_wrap=True, min_width=max(widest, len(column)))
        else:
            table.add_column(column, overflow="fold")
    for row in listing.rows:
        table.add_row(*row)
    return table
