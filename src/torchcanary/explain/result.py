"""The explain section's stored rows as records (the records themselves are in ``cause.py``)."""

from __future__ import annotations

from torchcanary.explain.cause import ExplainSummary, Explanation, from_json
from torchcanary.store.rows import SectionResult

__all__ = ["from_json", "from_rows"]


def from_rows(rows: list[SectionResult]) -> tuple[ExplainSummary | None, list[Explanation]]:
    """The explain section's rows of a run: its summary, and its explanations in order."""
    records = [from_json(row.to_json()) for row in rows]
    summary = next((r for r in records if isinstance(r, ExplainSummary)), None)
    return summary, [r for r in records if isinstance(r, Explanation)]
