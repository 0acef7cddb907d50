"""What the bench's report reads beside its rows: each benchmark's recent history.

Loaded once with the ``RunView`` (the section contract's ``load_view``), from the runs the
store held up to this one, so a report rendered again later shows the same history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchcanary.bench import result
from torchcanary.bench.section import SECTION
from torchcanary.store.history import HistoryEntry, HistoryFilter, history

if TYPE_CHECKING:
    from torchcanary.store.base import ResultStore
    from torchcanary.store.rows import RunRow, SectionResult

RECENT_RUNS = 10  # how many runs of each benchmark's history its report shows


def load(
    store: ResultStore, run: RunRow, rows: list[SectionResult]
) -> dict[str, list[HistoryEntry]]:
    """Each of the run's benchmarks' last results in this store (most recent 10).

    Runs stored later are left out, so the report rendered again later shows the same.
    Only the store's own profile counts: a fleet profile's history is that hardware's.
    """
    up_to = HistoryFilter(until=run.created_at + 1e-3, limit=RECENT_RUNS, profile=store.profile)
    return {row.key: history(store, row.key, SECTION, up_to, result.from_json) for row in rows}


def recent(view: Any, bench_id: str) -> list[HistoryEntry]:
    """``bench_id``'s history as the run view loaded it (none where it was not loaded)."""
    loaded: dict[str, list[HistoryEntry]] = view.section_views.get(SECTION) or {}
    return loaded.get(bench_id, [])
