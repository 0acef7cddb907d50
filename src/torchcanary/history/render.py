"""History as a table for the terminal and a plot file (SVG) for people and CI artefacts.

Each section says how its items are drawn (``history_plot`` in the section contract: the
bench draws its forest plot, one row per run, ratio candidate/baseline with its interval);
an item of a section that draws nothing of its own is a strip of verdicts.
"""

from __future__ import annotations

import time

from torchcanary.report_kit.svg import verdict_strip
from torchcanary.sections import registered
from torchcanary.store.history import HistoryEntry


def when(entry: HistoryEntry) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(entry.created_at))


def ratio_text(entry: HistoryEntry) -> str:
    if entry.ratio is None or entry.ci_low is None or entry.ci_high is None:
        return "–"
    return f"{entry.ratio:.3f} [{entry.ci_low:.3f}, {entry.ci_high:.3f}]"


def plot(item: str, section: str, entries: list[HistoryEntry]) -> str:
    """The SVG for ``item``'s history: its section's own plot, else a strip of verdicts."""
    own = registered().get(section)
    drawn = own.history_plot(item, entries) if own is not None else None
    return drawn or verdict_strip(
        f"{item}: history", [(entry.label, entry.verdict) for entry in entries]
    )
