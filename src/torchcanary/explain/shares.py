"""Shares of a delta with intervals, by the bootstrap over repeated measurements.

Every share an explanation shows is a statistic of repeated, separately run measurements
(rounds, each holding every arm measured back to back in a random order: the baseline, the
candidate, the candidate with a setting set back); its interval is the percentile
bootstrap over those rounds, resampled whole, so the machine's drift between rounds stays
out of it.
Pure Python and seeded, so the same samples give the same interval.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
DRAWS = 1000
CONFIDENCE = 0.95

Interval = tuple[float, float, float]  # estimate, low, high


def _percentiles(values: list[float], confidence: float) -> tuple[float, float]:
    ordered = sorted(values)
    tail = (1 - confidence) / 2
    low = ordered[int(tail * (len(ordered) - 1))]
    high = ordered[round((1 - tail) * (len(ordered) - 1))]
    return low, high


def _finite(statistic: Callable[..., float], *args: Any) -> float | None:
    try:
        value = statistic(*args)
    except (ZeroDivisionError, ValueError, statistics.StatisticsError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def paired(
    statistic: Callable[[list[T]], float],
    rounds: Sequence[T],
    draws: int = DRAWS,
    confidence: float = CONFIDENCE,
) -> Interval | None:
    """``statistic`` of the rounds and its bootstrap interval, rounds resampled whole."""
    whole = list(rounds)
    estimate = _finite(statistic, whole)
    if estimate is None:
        return None
    rng = random.Random(31)
    drawn = [_finite(statistic, rng.choices(whole, k=len(whole))) for _ in range(draws)]
    kept = [value for value in drawn if value is not None]
    if len(kept) < draws // 2:
        return None
    return (estimate, *_percentiles(kept, confidence))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
