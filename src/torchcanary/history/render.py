"""History as a table for the terminal and a plot file (SVG) for people and CI artefacts.

A benchmark's history is drawn as the bench report's forest plot, one row per run
(ratio candidate/baseline with its interval); a claim's or drill's as a strip of verdicts.
"""

from __future__ import annotations

import math
import time
from html import escape

from torchcanary.history.query import HistoryEntry
from torchcanary.measure.plots import VERDICT_COLOURS, ForestRow, forest

_OTHER_COLOURS = {
    "already in baseline": "#1a7f37",
    "new in candidate": "#1a7f37",
    "passed": "#1a7f37",
    "regressed": "#cf222e",
    "failed": "#cf222e",
    "error": "#cf222e",
}


def when(entry: HistoryEntry) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(entry.created_at))


def ratio_text(entry: HistoryEntry) -> str:
    if entry.ratio is None or entry.ci_low is None or entry.ci_high is None:
        return "–"
    return f"{entry.ratio:.3f} [{entry.ci_low:.3f}, {entry.ci_high:.3f}]"


def plot(item: str, section: str, entries: list[HistoryEntry]) -> str:
    """The SVG for ``item``'s history: a forest for a benchmark, a verdict strip otherwise."""
    if section == "bench":
        rows = [
            ForestRow(
                f"{when(e)} {e.candidate} vs {e.baseline}",
                e.ratio,
                e.ci_low if e.ci_low is not None else e.ratio,
                e.ci_high if e.ci_high is not None else e.ratio,
                e.verdict,
            )
            for e in entries
            if e.ratio is not None and math.isfinite(e.ratio) and e.ratio > 0
        ]
        if rows:
            return forest(rows, equivalence=0.02, title=f"{item}: history")
    return _strip(item, entries)


def _strip(item: str, entries: list[HistoryEntry]) -> str:
    row_h, top = 18, 28
    height = top + row_h * max(len(entries), 1) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="{height}" role="img" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="4" y="14" font-weight="bold">{escape(item)}: history</text>',
    ]
    for index, entry in enumerate(entries):
        y = top + index * row_h + row_h / 2
        colour = _OTHER_COLOURS.get(entry.verdict, VERDICT_COLOURS.get(entry.verdict, "#57606a"))
        label = f"{when(entry)} {entry.candidate} vs {entry.baseline}"
        parts.append(f'<text x="4" y="{y + 4:.1f}">{escape(label)}</text>')
        parts.append(
            f'<rect x="330" y="{y - 6:.1f}" width="12" height="12" fill="{colour}"/>'
            f'<text x="348" y="{y + 4:.1f}" fill="{colour}">{escape(entry.verdict)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def recent_html(item: str, entries: list[HistoryEntry], run_id: str) -> str:
    """A benchmark's recent history for its report, when the store has runs before this."""
    if not any(entry.run_id != run_id for entry in entries):
        return ""
    return (
        f"<h5>Recent history in this store ({len(entries)} runs, this one last)</h5>"
        f"<figure>{plot(item, 'bench', entries)}</figure>"
    )
