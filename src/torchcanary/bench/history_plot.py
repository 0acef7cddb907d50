"""An item's history drawn: a benchmark's forest plot, one row per stored run, or a strip
of verdicts (a claim's, a drill's, or a benchmark's without ratios).

Lives with the bench section (it draws with ``bench/plots.py``) so that the bench report
and the ``history`` command both reach it without the two packages importing each other.
"""

from __future__ import annotations

import math
from html import escape

from torchcanary.bench.plots import VERDICT_COLOURS, ForestRow, forest
from torchcanary.store.history import HistoryEntry

_OTHER_COLOURS = {
    "already in baseline": "#1a7f37",
    "new in candidate": "#1a7f37",
    "passed": "#1a7f37",
    "regressed": "#cf222e",
    "failed": "#cf222e",
    "error": "#cf222e",
}


def history_forest(item: str, entries: list[HistoryEntry], half_band: float) -> str | None:
    """The forest of ``item``'s ratios across runs, shading the band a "same" had to fit
    (``half_band``, as a fraction); None when no run has a ratio to draw."""
    rows = [
        ForestRow(
            e.label,
            e.ratio,
            e.ci_low if e.ci_low is not None else e.ratio,
            e.ci_high if e.ci_high is not None else e.ratio,
            e.verdict,
        )
        for e in entries
        if e.ratio is not None and math.isfinite(e.ratio) and e.ratio > 0
    ]
    return forest(rows, equivalence=half_band, title=f"{item}: history") if rows else None


def verdict_strip(item: str, entries: list[HistoryEntry]) -> str:
    """One row per run: when, what was compared, and the verdict in its colour."""
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
        parts.append(f'<text x="4" y="{y + 4:.1f}">{escape(entry.label)}</text>')
        parts.append(
            f'<rect x="330" y="{y - 6:.1f}" width="12" height="12" fill="{colour}"/>'
            f'<text x="348" y="{y + 4:.1f}" fill="{colour}">{escape(entry.verdict)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def recent_html(item: str, entries: list[HistoryEntry], run_id: str, half_band: float) -> str:
    """A benchmark's recent history for its report, when the store has runs before this,
    shaded with this run's band (``half_band``)."""
    if not any(entry.run_id != run_id for entry in entries):
        return ""
    svg = history_forest(item, entries, half_band) or verdict_strip(item, entries)
    return (
        f"<h5>Recent history in this store ({len(entries)} runs, this one last)</h5>"
        f"<figure>{svg}</figure>"
    )
