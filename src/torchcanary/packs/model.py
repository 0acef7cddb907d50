"""What a pack is: a release, the notes it was written from (with checksum), and its claims.

A pack lives in a Python package holding ``pack.json`` (and the notes file it cites). The
package itself is walked for probe modules, plus any modules ``pack.json`` names. Loading
checks the pack's own consistency; whether its probes exist is checked at discovery.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary.errors import ConfigError

PACK_FILE = "pack.json"
PACK_SCHEMA = 1
ANY_RELEASE = "*"  # a release-independent pack (binary sanity)
UNPROBED = "unprobed"


class PackError(ConfigError):
    """A pack is inconsistent: bad data file, duplicate claim id, missing probe, bad checksum."""


@dataclass(frozen=True)
class PackClaim:
    """One claim of the notes: the sentence quoted, and the probes that check it (maybe none)."""

    id: str
    quote: str
    topic: str
    baseline_expected: str  # what the baseline should show: "absent", "confirmed" or "any"
    probes: tuple[str, ...] = ()
    needs: str = ""  # for an unprobed claim: what checking it would take

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "quote": self.quote,
            "topic": self.topic,
            "baseline_expected": self.baseline_expected,
            "probes": list(self.probes) or UNPROBED,
        }
        if self.needs:
            data["needs"] = self.needs
        return data


@dataclass(frozen=True)
class Pack:
    """A release's claims. ``module`` is the package it came from (its probes live there)."""

    name: str
    release: str
    title: str
    module: str
    claims: tuple[PackClaim, ...]
    probe_modules: tuple[str, ...] = ()
    notes_file: str | None = None
    notes_sha256: str | None = None
    runs_first: bool = False
    directory: str = field(default="", compare=False)

    @property
    def release_independent(self) -> bool:
        return self.release == ANY_RELEASE

    def probe_ids(self) -> list[str]:
        return list(dict.fromkeys(pid for claim in self.claims for pid in claim.probes))

    def to_json(self) -> dict[str, Any]:
        """The pack as stored with a run and written by the checklist (pack.json's form)."""
        data: dict[str, Any] = {
            "schema": PACK_SCHEMA,
            "name": self.name,
            "release": self.release,
            "title": self.title,
            "runs_first": self.runs_first,
            "probe_modules": list(self.probe_modules),
            "claims": [claim.to_json() for claim in self.claims],
        }
        if self.notes_file:
            data["notes"] = {"file": self.notes_file, "sha256": self.notes_sha256}
        return data


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _claim(raw: dict[str, Any], where: str) -> PackClaim:
    try:
        probes = raw.get("probes", UNPROBED)
        return PackClaim(
            id=str(raw["id"]),
            quote=str(raw["quote"]),
            topic=str(raw.get("topic", "")),
            baseline_expected=str(raw.get("baseline_expected", "any")),
            probes=() if probes == UNPROBED else tuple(str(p) for p in probes),
            needs=str(raw.get("needs", "")),
        )
    except (KeyError, TypeError) as exc:
        raise PackError(f"{where}: a claim lacks {exc}; each needs id and quote") from None


def pack_from_json(data: dict[str, Any], module: str, directory: Path) -> Pack:
    """Build and check a pack from its data; ``directory`` holds the notes file it cites."""
    where = f"pack {module} ({directory / PACK_FILE})"
    if data.get("schema") != PACK_SCHEMA:
        raise PackError(f"{where}: schema {data.get('schema')!r} is not {PACK_SCHEMA}")
    claims = tuple(_claim(raw, where) for raw in data.get("claims", ()))
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise PackError(f"{where}: claim id {claim.id!r} appears twice; give each its own")
        seen.add(claim.id)
    notes = data.get("notes") or {}
    notes_file, notes_sha = notes.get("file"), notes.get("sha256")
    if notes_file:
        notes_path = directory / notes_file
        if not notes_path.is_file():
            raise PackError(f"{where}: notes file {notes_file} is missing from the pack")
        actual = sha256_of(notes_path)
        if actual != notes_sha:
            raise PackError(
                f"{where}: notes {notes_file} have sha256 {actual[:12]}…, the pack cites "
                f"{str(notes_sha)[:12]}…; the notes changed: re-run `torchcanary claims "
                "checklist` and review the claims"
            )
    return Pack(
        name=str(data.get("name", module)),
        release=str(data["release"]),
        title=str(data.get("title", "")),
        module=module,
        claims=claims,
        probe_modules=tuple(data.get("probe_modules", ())),
        notes_file=notes_file,
        notes_sha256=notes_sha,
        runs_first=bool(data.get("runs_first", False)),
        directory=str(directory),
    )


def load_pack_file(path: Path, module: str) -> Pack:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PackError(f"pack {module}: cannot read {path}: {exc}") from None
    return pack_from_json(data, module, path.parent)
