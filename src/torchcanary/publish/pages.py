"""The site's own pages: the overview and each item's history. Every link is relative, so
the site opens from a file share as well as from any static host; no script, no network.
"""

from __future__ import annotations

import hashlib
import re
import time
from html import escape

from torchcanary.history.render import plot, ratio_text, when
from torchcanary.publish.inventory import Cell, RunInfo, latest_per_cell
from torchcanary.report.style import PAGE_CSS
from torchcanary.store.history import HistoryEntry

SITE_CSS = (
    PAGE_CSS
    + """
.cell{white-space:nowrap} .when{font-size:.85em;color:#555} svg{max-width:100%;height:auto}
nav a{margin-right:1rem}
"""
)


def run_page(run_id: str) -> str:
    """A run's report, relative to the site's root."""
    return f"runs/{run_id}/report.html"


def history_page(section: str, item: str) -> str:
    """An item's history page, relative to the site's root; the name is safe on any file
    system and unique (a short hash of the item keeps two similar ids apart)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", item).strip("._")[:60] or "item"
    tag = hashlib.sha256(f"{section}\0{item}".encode()).hexdigest()[:8]
    return f"history/{section}/{stem}-{tag}.html"


def _day(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(stamp))


def _page(title: str, body: str, root: str) -> str:
    nav = (
        f'<nav><a href="{root}index.html">overview</a>'
        f'<a href="{root}regressions.txt">regressions (text)</a>'
        f'<a href="{root}regressions.json">regressions (JSON)</a></nav>'
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{SITE_CSS}</style></head><body>"
        f"{nav}<h1>{escape(title)}</h1>{body}</body></html>"
    )


def overview(infos: list[RunInfo], items: dict[str, list[str]], regressions: int) -> str:
    """Candidates x hardware, each cell its latest decision; what blocks; every history."""
    latest = latest_per_cell(infos)
    hardware = sorted({cell.hardware for cell in latest})
    newest: dict[tuple[str, str], float] = {}
    for cell, info in latest.items():  # the builds run most recently come first
        build = (cell.candidate, cell.variant)
        newest[build] = max(newest.get(build, 0.0), info.created_at)
    builds = sorted(newest, key=lambda build: (-newest[build], build))
    head = "".join(f"<th>{escape(name)}</th>" for name in hardware)
    rows = ""
    for candidate, variant in builds:
        cells = "".join(
            _overview_cell(latest.get(Cell(candidate, variant, name))) for name in hardware
        )
        rows += f"<tr><th>{escape(candidate)} +{escape(variant)}</th>{cells}</tr>"
    body = (
        _upgrade(latest)
        + "<h2>Latest decision per candidate and hardware</h2>"
        + f"<table><tr><th>candidate build</th>{head}</tr>{rows}</table>"
        + _blocking(latest, regressions)
        + _histories(items)
        + _all_runs(infos)
    )
    return _page("torchcanary: the release qualification", body, "")


def _badge(info: RunInfo) -> str:
    """The run's decision as a badge coloured by its label, in its report's first words."""
    return (
        f'<span class="badge {escape(info.decision)}">'
        f"{escape(info.headline or info.decision)}</span>"
    )


def _overview_cell(info: RunInfo | None) -> str:
    if info is None:
        return "<td>–</td>"
    digest = ""
    if info.evidence:  # cited whole; shown short, the whole digest on hover
        short = info.evidence[:19] + ("…" if len(info.evidence) > 19 else "")
        digest = f'<div class="when" title="{escape(info.evidence)}">digest {escape(short)}</div>'
    return (
        f'<td class="cell">{_badge(info)} '
        f'<a href="{run_page(info.run_id)}">run {escape(info.run_id)}</a>'
        f'<div class="when">{_day(info.created_at)}</div>{digest}</td>'
    )


def _upgrade(latest: dict[Cell, RunInfo]) -> str:
    """The upgrade qualified: each baseline and the candidates set against it."""
    pairs: dict[str, set[str]] = {}
    for info in latest.values():
        pairs.setdefault(info.baseline, set()).add(info.candidate)
    if not pairs:
        return "<p>The store holds no runs yet.</p>"
    lines = "".join(
        f"<li>from <code>{escape(base)}</code> to "
        + ", ".join(f"<code>{escape(c)}</code>" for c in sorted(cands))
        + "</li>"
        for base, cands in sorted(pairs.items())
    )
    return f"<h2>The upgrade being qualified</h2><ul>{lines}</ul>"


def _blocking(latest: dict[Cell, RunInfo], regressions: int) -> str:
    blocked = [(cell, info) for cell, info in latest.items() if info.decision != "go"]
    if not blocked:
        return "<h2>What blocks it</h2><p>Nothing: every cell's latest run is go.</p>"
    lines = ""
    for cell, info in sorted(blocked, key=lambda pair: pair[0].series):
        reasons = "".join(f"<li>{escape(reason)}</li>" for reason in info.reasons)
        lines += (
            f"<li>{escape(cell.candidate)} +{escape(cell.variant)} on {escape(cell.hardware)}: "
            f"{_badge(info)} "
            f'<a href="{run_page(info.run_id)}">run {escape(info.run_id)}</a>'
            f"<ul>{reasons}</ul></li>"
        )
    return (
        f"<h2>What blocks it</h2><p>{regressions} open regression(s) (a hardware and build "
        "whose latest run is no-go): "
        '<a href="regressions.txt">the list</a> (<a href="regressions.json">JSON</a>), '
        "each set against its last go run as <code>torchcanary compare</code> does, its "
        "changes for the worse listed (improvements left out). Below, each such run's "
        "blocking reasons, as its decision gives them.</p>"
        f"<ul>{lines}</ul>"
    )


def _histories(items: dict[str, list[str]]) -> str:
    parts = ""
    for section, names in sorted(items.items()):
        links = "".join(
            f'<li><a href="{history_page(section, item)}">{escape(item)}</a></li>' for item in names
        )
        parts += f"<h3>{escape(section)}</h3><ul>{links}</ul>"
    return f"<h2>History of each result across runs</h2>{parts or '<p>None stored.</p>'}"


def _all_runs(infos: list[RunInfo]) -> str:
    rows = "".join(
        f'<tr><td><a href="{run_page(info.run_id)}">{escape(info.run_id)}</a></td>'
        f"<td>{_day(info.created_at)}</td><td>{escape(info.baseline)}</td>"
        f"<td>{escape(info.candidate)}</td>"
        f"<td>{escape('; '.join(cell.series for cell in info.cells))}</td>"
        f"<td>{_badge(info)}</td></tr>"
        for info in sorted(infos, key=lambda i: (i.created_at, i.run_id), reverse=True)
    )
    return (
        "<h2>Every run</h2><table><tr><th>run</th><th>when</th><th>baseline</th>"
        f"<th>candidate</th><th>hardware, build</th><th>decision</th></tr>{rows}</table>"
    )


def item_history(
    section: str, item: str, entries: list[HistoryEntry], cells: dict[tuple[str, str], Cell]
) -> str:
    """``item``'s history, one plot and table per hardware and build variant: runs of
    different hardware or builds are never drawn on one axis. ``cells`` maps (run,
    profile) to the cell of that run's results."""
    groups: dict[str, list[tuple[HistoryEntry, Cell]]] = {}
    for entry in entries:
        cell = cells.get((entry.run_id, entry.profile))
        if cell is not None:
            groups.setdefault(cell.series, []).append((entry, cell))
    body = f"<p>{escape(section)} result <code>{escape(item)}</code> in {len(entries)} run(s).</p>"
    for series, found in sorted(groups.items()):
        rows = "".join(
            f'<tr><td><a href="../../{run_page(entry.run_id)}">{escape(entry.run_id)}</a></td>'
            f"<td>{when(entry)}</td><td>{escape(entry.baseline)}</td>"
            f"<td>{escape(entry.candidate)}</td>"
            f'<td><span class="badge {escape(entry.verdict)}">{escape(entry.verdict)}</span></td>'
            f"<td>{ratio_text(entry)}</td></tr>"
            for entry, _ in found
        )
        drawn = plot(item, section, [entry for entry, _ in found])
        body += (
            f"<h2>on {escape(series)}</h2>{drawn}<table><tr><th>run</th><th>when (UTC)</th>"
            "<th>baseline</th><th>candidate</th><th>verdict</th><th>ratio [interval]</th>"
            f"</tr>{rows}</table>"
        )
    return _page(f"{item} ({section}): history", body, "../../")
