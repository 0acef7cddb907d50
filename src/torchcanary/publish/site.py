"""Publishing a store as a static site, incrementally.

The site's ``publish-manifest.json`` keeps, for every page, the digest of what it was made
from (a run's page: its stored row; an item's history: the digests of the runs that hold
it; the overview and the regressions: every run's), and what each run is (``RunInfo``). A
page whose inputs' digest is unchanged, and whose file is still there, is left alone, so
re-publishing after one new run reads and renders that run, its items' histories, the
overview and the regressions, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torchcanary import __version__
from torchcanary.publish import pages
from torchcanary.publish.inventory import Cell, RunInfo, describe, run_digest
from torchcanary.publish.regressions import as_text, open_regressions
from torchcanary.report.json_out import strict_json
from torchcanary.report.render import write_run_files
from torchcanary.sections import get_section, item_history
from torchcanary.store.base import ResultStore
from torchcanary.store.history import HistoryFilter
from torchcanary.store.rows import RunRow

MANIFEST = "publish-manifest.json"
MANIFEST_SCHEMA = 1
OVERVIEW = "index.html"
REGRESSIONS = ("regressions.txt", "regressions.json")


@dataclass
class Published:
    """What a publish did: the pages it made, and how many it left as they were."""

    rendered: list[str] = field(default_factory=list)
    kept: int = 0
    runs: int = 0
    regressions: int = 0


@dataclass
class _Build:
    out: Path
    before: dict[str, str]  # page -> digest, as the last publish left them
    now: dict[str, str] = field(default_factory=dict)
    done: Published = field(default_factory=Published)

    def stale(self, page: str, digest: str, force: bool = False) -> bool:
        """Whether ``page`` must be made (again); either way it is now ``digest``."""
        self.now[page] = digest
        if not force and self.before.get(page) == digest and (self.out / page).is_file():
            self.done.kept += 1
            return False
        self.done.rendered.append(page)
        return True

    def write(self, page: str, text: str) -> None:
        path = self.out / page
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text)
        os.replace(partial, path)


def publish(store: ResultStore, out: Path) -> Published:
    """Make (or bring up to date) the site of ``store`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out)
    build = _Build(out, manifest.get("pages", {}))
    known = {key: RunInfo.from_json(value) for key, value in manifest.get("runs", {}).items()}
    infos = [_run(store, run, known.get(run.run_id), build) for run in store.runs()]
    build.done.runs = len(infos)
    items = _histories(store, infos, build)
    everything = _digest([info.digest for info in infos])  # what the overview rests on
    build.done.regressions = _regressions(store, infos, build, everything)
    if build.stale(OVERVIEW, everything):
        build.write(OVERVIEW, pages.overview(infos, items, build.done.regressions))
    _remove_gone(out, build)
    _write_manifest(out, build, infos)
    return build.done


def _regressions(store: ResultStore, infos: list[RunInfo], build: _Build, digest: str) -> int:
    """The open regressions' text and JSON, made again when any run changed; how many."""
    text, data = (build.stale(page, digest) for page in REGRESSIONS)
    if not (text or data):
        return len(json.loads((build.out / REGRESSIONS[1]).read_text())["regressions"])
    regressions = open_regressions(store, infos)
    build.write(REGRESSIONS[0], as_text(regressions))
    build.write(REGRESSIONS[1], strict_json({"regressions": regressions}))
    return len(regressions)


def _run(store: ResultStore, run: RunRow, known: RunInfo | None, build: _Build) -> RunInfo:
    """The run's facts, and its four files made again only when its stored row changed."""
    digest = run_digest(run)
    page = pages.run_page(run.run_id)
    if not build.stale(page, digest, force=known is None) and known is not None:
        return known
    view, info = describe(store, run)
    folder = build.out / Path(page).parent
    write_run_files(view, folder)
    results = json.loads((folder / "results.json").read_text())
    return replace(info, evidence=_evidence_digest(results))


def _evidence_digest(results: dict[str, Any]) -> str:
    """The run's evidence digest as its ``results.json`` records it ('' before runs
    carried one): ``evidence.digest``, or a top-level ``digest``."""
    recorded = results.get("evidence")
    digest = recorded.get("digest") if isinstance(recorded, dict) else results.get("digest")
    return digest if isinstance(digest, str) else ""


def _histories(store: ResultStore, infos: list[RunInfo], build: _Build) -> dict[str, list[str]]:
    """Each item's history page, made again when a run holding it is new or changed."""
    holders: dict[tuple[str, str], list[RunInfo]] = {}
    for info in infos:
        for section_item in info.items:
            holders.setdefault(section_item, []).append(info)
    cells: dict[tuple[str, str], Cell] = {
        (info.run_id, cell.profile): cell for info in infos for cell in info.cells
    }
    names: dict[str, list[str]] = {}
    for (section, item), runs in sorted(holders.items()):
        names.setdefault(section, []).append(item)
        page = pages.history_page(section, item)
        if not build.stale(page, _digest([info.digest for info in runs])):
            continue
        entries = item_history(get_section(section), store, item, HistoryFilter())
        build.write(page, pages.item_history(section, item, entries, cells))
    return names


def _digest(parts: list[str]) -> str:
    text = json.dumps([__version__, MANIFEST_SCHEMA, *sorted(parts)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read_manifest(out: Path) -> dict[str, Any]:
    """The last publish's manifest; another version's (or none) makes every page again."""
    path = out / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if manifest.get("schema") != MANIFEST_SCHEMA or manifest.get("torchcanary") != __version__:
        return {}
    return manifest


def _write_manifest(out: Path, build: _Build, infos: list[RunInfo]) -> None:
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "torchcanary": __version__,
        "pages": build.now,
        "runs": {info.run_id: info.to_json() for info in infos},
    }
    build.write(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


def _remove_gone(out: Path, build: _Build) -> None:
    """Pages of runs or items the store no longer holds go too."""
    for page in set(build.before) - set(build.now):
        path = out / page
        if page.startswith("runs/"):
            shutil.rmtree(path.parent, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
