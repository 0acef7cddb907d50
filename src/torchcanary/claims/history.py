"""The claims across runs: a claim's history and its part of comparing two runs.

The claims keep their results as probe results in a table of their own, one row per
environment; a run's verdict for a claim is what the two environments' verdicts mean
together (``compare_claim``). The section contract reads these for ``torchcanary history``
and ``torchcanary compare``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchcanary.claims.records import TABLE
from torchcanary.claims.view import ClaimComparison, claims_of, compare_claim
from torchcanary.probe_result import Verdict
from torchcanary.store.history import HistoryEntry, HistoryFilter, query_history

if TYPE_CHECKING:
    from torchcanary.section_types import RunView
    from torchcanary.store.base import ResultStore


def holds(store: ResultStore, item: str) -> bool:
    """Whether any run of ``store`` has a result for the claim ``item``."""
    return bool(store.query(f"SELECT 1 FROM {TABLE} WHERE probe_id = ? LIMIT 1", (item,)))


def history(store: ResultStore, item: str, run_filter: HistoryFilter) -> list[HistoryEntry]:
    """The claim ``item`` across the runs that pass ``run_filter``, oldest first."""
    return query_history(
        store,
        item,
        run_filter,
        f"NULL FROM {TABLE} x",
        ("x.probe_id = ?", [item]),
        verdict_of=_claim_verdict,
    )


def _claim_verdict(verdicts: dict[str, str]) -> str:
    if "baseline" in verdicts and "candidate" in verdicts:
        try:
            pair = Verdict(verdicts["baseline"]), Verdict(verdicts["candidate"])
        except ValueError:
            return "?"
        return compare_claim(*pair).value
    return "incomplete"


# A claim that held in the baseline and no longer does; one new in the candidate is better.
WORSE_VERDICTS = frozenset({ClaimComparison.REGRESSED.value})


def compared(view: RunView) -> dict[str, dict[str, Any]]:
    """Each claim's verdict in ``view``, as ``compare`` sets it against another run's."""
    return {
        row.probe_id: {"verdict": row.comparison.value if row.comparison else "incomplete"}
        for row in claims_of(view).rows()
    }
