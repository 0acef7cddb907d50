"""A benchmark's history drawn: its forest plot, one row per stored run, or (without
ratios) the strip of verdicts every section's history falls back to (``report/svg.py``).
"""

from __future__ import annotations

import math

from torchcanary.bench.plots import ForestRow, forest
from torchcanary.report_kit.svg import verdict_strip
from torchcanary.store.history import HistoryEntry


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


def recent_html(item: str, entries: list[HistoryEntry], run_id: str, half_band: float) -> str:
    """A benchmark's recent history for its report, when the store has runs before this,
    shaded with this run's band (``half_band``)."""
    if not any(entry.run_id != run_id for entry in entries):
        return ""
    svg = history_forest(item, entries, half_band) or verdict_strip(
        f"{item}: history", [(entry.label, entry.verdict) for entry in entries]
    )
    return (
        f"<h5>Recent history in this store ({len(entries)} runs, this one last)</h5>"
        f"<figure>{svg}</figure>"
    )
