"""History as a table for the terminal and a plot file (SVG) for people and CI artefacts.

A benchmark's history is drawn as the bench report's forest plot, one row per run
(ratio candidate/baseline with its interval); a claim's or drill's as a strip of verdicts.
"""

from __future__ import annotations

import time

from torchcanary.measure.history_plot import history_forest, verdict_strip
from torchcanary.store.history import HistoryEntry


def when(entry: HistoryEntry) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(entry.created_at))


def ratio_text(entry: HistoryEntry) -> str:
    if entry.ratio is None or entry.ci_low is None or entry.ci_high is None:
        return "–"
    return f"{entry.ratio:.3f} [{entry.ci_low:.3f}, {entry.ci_high:.3f}]"


def plot(item: str, section: str, entries: list[HistoryEntry]) -> str:
    """The SVG for ``item``'s history: a forest for a benchmark, a verdict strip otherwise."""
    forest = history_forest(item, entries) if section == "bench" else None
    return forest or verdict_strip(item, entries)
