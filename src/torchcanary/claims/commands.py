"""The claims' own commands, ``probes``, ``packs`` and ``claims checklist``: what is
installed to check a release against, and a first pack drafted from its notes.

The CLI adds them through the section contract (``add_commands``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler, Parser
from torchcanary.errors import EXIT_GO, CanaryError
from torchcanary.report_kit.listing import Listing, add_format_flags, show


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``probes``, ``packs`` and ``claims``; their handlers."""
    probes = commands.add_parser("probes", help="list every claim probe and its requirements")
    probes.add_argument("--probe-module", action="append", dest="probe_modules")
    add_format_flags(probes)

    packs = commands.add_parser("packs", help="list the claims packs installed (one per release)")
    add_format_flags(packs)

    claims = commands.add_parser("claims", help="work with release notes and claims packs")
    claims_commands = claims.add_subparsers(
        dest="claims_command", metavar="COMMAND", parser_class=Parser, required=True
    )
    checklist = claims_commands.add_parser(
        "checklist", help="draft a pack from a release-notes text: a claim per sentence"
    )
    checklist.add_argument("notes", type=Path, metavar="NOTES", help="notes saved as .md or .txt")
    checklist.add_argument("--release", required=True, help="the release the notes are for")
    checklist.add_argument(
        "--output", type=Path, help="where to write the draft pack.json (default pack-RELEASE.json)"
    )
    return {"probes": _cmd_probes, "packs": _cmd_packs, "claims": _cmd_claims}


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
