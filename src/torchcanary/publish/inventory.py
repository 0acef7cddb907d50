"""What each stored run is, as the site needs it: the cell it fills (candidate, build
variant, hardware), its decision and reasons, and the items it holds.

A run's facts are read once (``describe``, from its ``RunView``) and kept in the site's
manifest under the run's digest, so re-publishing reads only runs that are new or changed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from torchcanary import __version__
from torchcanary.policy import headline
from torchcanary.report.view import load_run_view
from torchcanary.section_types import RunView
from torchcanary.sections import registered, stores_rows
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import RunRow

FINISHED = "finished"


@dataclass(frozen=True)
class Cell:
    """One place of the overview: a candidate build on one hardware profile.

    Runs of different build variants (``+cpu``, ``+cu130``) or hardware are different
    cells, and their histories are drawn apart.
    """

    candidate: str  # the candidate's torch version without its variant
    variant: str  # the candidate's build variant, as its manifest says ('default': none)
    hardware: str  # the fleet profile, else the machine its manifest describes
    profile: str = field(default="", compare=False)  # the store's profile ('' one machine)

    @property
    def series(self) -> str:
        """The hardware and variant, which runs must share to be set side by side."""
        return f"{self.hardware}, build {self.variant}"


@dataclass(frozen=True)
class RunInfo:
    """One run as the site shows it; plain data, kept in the manifest between publishes."""

    run_id: str
    digest: str  # of the stored run row and torchcanary's version: what its page rests on
    created_at: float
    status: str
    decision: str
    reasons: list[str]
    baseline: str
    candidate: str
    cells: list[Cell]
    items: list[tuple[str, str]] = field(default_factory=list)  # (section, item)
    evidence: str = ""  # the run's evidence digest, when its results carry one
    # the decision as the run's report says it: a go that let unchecked units through
    # reads "go with N units not checked", never a bare go
    headline: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunInfo:
        return cls(
            **{
                **data,
                "cells": [Cell(**cell) for cell in data["cells"]],
                "items": [(section, item) for section, item in data["items"]],
            }
        )


def run_digest(run: RunRow) -> str:
    """What a run's page rests on. A run still going (or cut off) may gain rows at any
    time, so it has no stable digest: its page is made again on every publish."""
    facts = [__version__, run.run_id, run.created_at, run.finished_at, run.status]
    facts += [run.decision, run.decision_detail, run.plan]
    text = json.dumps(facts, sort_keys=True, default=str)
    if run.status != FINISHED:
        text += f"unfinished at {time.time_ns()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe(store: ResultStore, run: RunRow) -> tuple[RunView, RunInfo]:
    """The run's view, and what the site needs of it (its evidence digest is added once
    its ``results.json`` is written)."""
    view = load_run_view(store, run.run_id)
    scopes = dict(view.profiles) if view.profiles else {"": view}
    items = {item for scope in scopes.values() for item in _items(scope)}
    detail = run.decision_detail or {}
    info = RunInfo(
        run.run_id,
        run_digest(run),
        run.created_at,
        run.status,
        run.decision or "incomplete",
        [str(reason) for reason in detail.get("reasons", [])],
        str(run.plan.get("baseline", "")),
        str(run.plan.get("candidate", "")),
        [_cell(profile, scope) for profile, scope in scopes.items()],
        sorted(items),
        headline=headline(run.decision, detail),
    )
    return view, info


def _items(view: RunView) -> set[tuple[str, str]]:
    """The results with a history: those of every section ``compare`` sets side by side,
    named as ``history`` reads them (a row's key; a section with its own table: the ids
    its ``compared`` gives)."""
    found: set[tuple[str, str]] = set()
    for name, section in registered().items():
        compared = section.compared(view)
        if compared is None:
            continue
        ids = [row.key for row in view.sections.get(name, [])] if stores_rows(section) else compared
        found.update((name, item) for item in ids)
    return found


def _cell(profile: str, view: RunView) -> Cell:
    candidate = view.environments.get("candidate")
    facts = candidate.manifest.facts if candidate else {}
    version = str(facts.get("torch_version") or (candidate.torch_version if candidate else "?"))
    variant = str(facts.get("torch_build_variant") or _variant_of(version))
    return Cell(version.split("+")[0], variant, profile or _machine(facts), profile)


def _variant_of(version: str) -> str:
    return version.split("+", 1)[1] if "+" in version else "default"


def _machine(facts: dict[str, Any]) -> str:
    """A run made on one machine: its hardware as the candidate's manifest recorded it."""
    gpus = facts.get("gpus") or []
    if gpus:
        names = sorted({str(gpu.get("name", "gpu")) for gpu in gpus})
        return f"{len(gpus)}x {' + '.join(names)}"
    return str(facts.get("cpu_model") or "this machine")


def latest_per_cell(infos: list[RunInfo]) -> dict[Cell, RunInfo]:
    """The most recent run of every cell."""
    latest: dict[Cell, RunInfo] = {}
    for info in sorted(infos, key=lambda i: (i.created_at, i.run_id)):
        for cell in info.cells:
            latest[cell] = info
    return latest
