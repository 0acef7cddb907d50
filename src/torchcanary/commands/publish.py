"""``publish``: the store as a static site a team opens every day (no server: a file
share or any static host will do). Re-publishing makes again only what changed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.errors import EXIT_GO, CanaryError
from torchcanary.store.location import is_postgres_url

DESCRIPTION = """\
Build a static site from every run in a store: an overview (release candidates x hardware,
each cell the latest go / no-go with its date and a link to the run; the upgrade being
qualified and what blocks it), every run's report, the history of each benchmark, claim
and drill across runs (runs of different hardware or build variants drawn apart), and the
open regressions as regressions.txt and regressions.json (each hardware and build whose
latest run is no-go, set against its last go run as `torchcanary compare` does).

Links are relative: copy OUT anywhere, or publish into a shared folder from CI after each
run. OUT/publish-manifest.json records what each page was made from, so the next publish
into the same OUT makes again only the pages whose runs are new or changed."""

EXAMPLES = """\
examples:
  torchcanary publish site/                                  # the default store
  torchcanary publish /shared/canary --store postgresql://canary@db/canary
  python -m http.server -d site/ 8000                        # or open site/index.html"""


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``publish``; its handler."""
    parser = commands.add_parser(
        "publish",
        help="build (or bring up to date) a static site of every stored run",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="the site's folder (created)")
    parser.add_argument(
        "--store",
        help="SQLite file or postgresql://USER@HOST/DB "
        "(default: the config's, else canary-results/canary.db)",
    )
    parser.add_argument("--config", type=Path, help="config file whose store to use")
    return {"publish": _cmd_publish}


def _cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.config import result_paths
    from torchcanary.publish.site import publish
    from torchcanary.store.location import open_store

    store_path, _ = result_paths(args.config, {"store": args.store}, Path.cwd())
    if not is_postgres_url(store_path) and not Path(store_path).is_file():
        raise CanaryError(f"no store at {store_path}; pass --store PATH")
    if args.out.exists() and not args.out.is_dir():
        raise CanaryError(f"{args.out} is a file; name a folder for the site")
    started = time.perf_counter()
    with open_store(store_path, create=False) as store:
        done = publish(store, args.out)
    console.print(
        f"published {done.runs} runs to {args.out / 'index.html'}: {len(done.rendered)} "
        f"pages made, {done.kept} unchanged, {done.regressions} open regression(s), in "
        f"{time.perf_counter() - started:.1f} s",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_GO
