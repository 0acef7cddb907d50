"""Each side's torch family as the environment table shows it (HTML and markdown alike).

A row per requirement that named a companion (two projects can pin it differently), a cell
per side: the release with its build, the torch it needs, what it was paired from; a
companion whose build label is not torch's (``cu130`` beside ``+cpu``) is marked as the
build mismatch it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchcanary.section_types import RunView


def family_rows(view: RunView, roles: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(label, a cell per role); empty where no side has a companion."""
    sides = {
        role: {
            _label(row): row
            for row in view.environments[role].manifest.facts.get("torch_family", [])
        }
        for role in roles
    }
    labels = list(dict.fromkeys(label for role in roles for label in sides[role]))
    if labels == ["torch"] or not labels:
        return []
    rows = []
    for label in labels:
        cells = []
        for role in roles:
            row = sides[role].get(label)
            torch_build = str(sides[role].get("torch", {}).get("build", ""))
            cells.append(_cell(row, torch_build) if row else "-")
        rows.append((label, cells))
    return rows


def _label(row: dict[str, Any]) -> str:
    return "torch" if row.get("name") == "torch" else f"{row['name']} ({row['source']})"


def _cell(row: dict[str, Any], torch_build: str) -> str:
    build = str(row.get("build", ""))
    if row.get("name") == "torch":
        return build
    text = build
    if row.get("needs"):
        text += f", for torch {row['needs']}"
    if row.get("paired"):
        text += f" (paired; {row['given']} was given)"
    own_label = build.partition("+")[2] or "default"
    torch_label = torch_build.partition("+")[2] or "default"
    if own_label != torch_label:
        text += f"; build mismatch: {own_label} build beside torch's {torch_label}"
    return text
