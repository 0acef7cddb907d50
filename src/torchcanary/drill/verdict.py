"""The drill verdict vocabulary, defined once (its meaning is in ``drill/drill.py``)."""

from __future__ import annotations

import enum


class DrillVerdict(str, enum.Enum):
    """One drill in one environment; stored by value (``"not-checkable"``, ...)."""

    PASSED = "passed"
    FAILED = "failed"
    ABSENT = "absent"
    NOT_CHECKABLE = "not-checkable"
    ERROR = "error"
    FLAKY = "flaky"  # repeated: passed in some trials, not in others (drill/repeats.py)

    def __str__(self) -> str:  # in text (reasons, tables) a verdict reads as its stored word
        return self.value
