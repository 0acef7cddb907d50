"""``verify``: does a run's ``results.json`` still match the evidence digest it records
(and, with ``--store``, the one the store kept when the run ended)? Exit 0 on a match,
1 naming each part that differs, 2 when there is nothing to check.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.errors import EXIT_GO, EXIT_NO_GO, CanaryError
from torchcanary.report.evidence import (
    EVIDENCE_ARTIFACT,
    Evidence,
    citation,
    differences,
    evidence_of,
    recorded_evidence,
)


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``verify``; its handler."""
    verify = commands.add_parser(
        "verify",
        help="check a run's results.json against its evidence digest",
        description="Recompute the evidence digest of a run's results.json (docs/json-schema.md, "
        "'Evidence') and compare it with the one recorded in the file and, with --store, "
        "with the one the store kept. Exit 0 on a match, 1 on a mismatch.",
    )
    verify.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a run's output folder, or its results.json"
    )
    verify.add_argument(
        "--store",
        help="also compare with the digest this store kept (SQLite file or postgresql://)",
    )
    return {"verify": _cmd_verify}


def _results_path(given: Path) -> Path:
    path = given / "results.json" if given.is_dir() else given
    if not path.is_file():
        raise CanaryError(f"no results.json at {given}; pass a run's output folder")
    return path


def _stored(store_location: str, run_id: str) -> Evidence:
    from torchcanary.store.location import is_postgres_url, open_store

    if not is_postgres_url(store_location) and not Path(store_location).is_file():
        raise CanaryError(f"no store at {store_location}; pass --store PATH")
    with open_store(store_location, create=False) as store:
        for name, _, content in store.artifacts(run_id):
            if name == EVIDENCE_ARTIFACT:
                return Evidence.from_json(json.loads(content))
    raise CanaryError(
        f"{store_location} keeps no evidence for run {run_id}; it was made before runs "
        "carried one, or in another store (pass the store it ran with)"
    )


def _cmd_verify(args: argparse.Namespace, console: Console) -> int:
    path = _results_path(args.run_dir)
    try:
        results, recorded = recorded_evidence(path)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError) as exc:
        raise CanaryError(f"{path} is not a torchcanary results.json ({exc})") from exc
    if recorded is None:
        raise CanaryError(f"{path} records no evidence; rerun `torchcanary report RUN` first")
    run_id = str((results.get("run") or {}).get("run_id", "?"))
    now = evidence_of(results)
    checks = [("results.json's own evidence", recorded)]
    if args.store:
        checks.append((f"the store's ({args.store})", _stored(args.store, run_id)))
    found = False
    for where, against in checks:
        for difference in differences(against, now):
            console.print(
                f"mismatch with {where}: {difference}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            found = True
    if found:
        console.print(
            f"verify: MISMATCH for run {run_id} ({path})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_NO_GO
    console.print(
        f"verify: match: {citation(run_id, now)}", markup=False, highlight=False, soft_wrap=True
    )
    return EXIT_GO
