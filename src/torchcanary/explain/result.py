"""The explain section's stored rows as records (the records themselves are in ``cause.py``)."""

from __future__ import annotations

from torchcanary.explain.cause import Explanation, from_json
from torchcanary.store.rows import SectionResult

__all__ = ["from_json", "from_rows"]


def from_rows(rows: list[SectionResult]) -> list[Explanation]:
    """The explain section's rows of a run, as records in their stored order."""
    return [from_json(row.to_json()) for row in rows]
