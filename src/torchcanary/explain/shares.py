"""Shares of a delta with intervals that cover at their nominal rate, from a few rounds.

Every share an explanation shows is a statistic of repeated, separately run measurements
(rounds, each holding every arm measured back to back in a random order: the baseline, the
candidate, the candidate with a setting set back). Each round gives one value per quantity
(the change it saw, the part of it one cause accounts for), so the machine's drift between
rounds stays out of the comparison, and the intervals are Student's t over those per-round
values: a mean with ``t(n - 1)``, a share (a ratio of two means) by Fieller's method.

Why not the bootstrap: over 3 rounds a percentile bootstrap has 10 distinct resamples and
its "95 %" interval is close to the range of the rounds; in simulation it held the truth
about 3 times in 4 (``benchmarks/explain_interval_coverage.py`` shows both methods).
Fieller's interval is exact for normal per-round values and has no bound when the change
itself is not told apart from 0 in these rounds; then there is no share to show (None).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from torchcanary import stats

CONFIDENCE = 0.95
# A cause accounts for some of a change only when its share's interval lies above this
# fraction of it. An honest 95 % interval still clears 0 by chance for one cause in forty
# that does nothing (and a finding has several candidate causes); clearing a quarter of the
# change by chance needs a far larger fluke, and a smaller share is not worth acting on.
MATERIAL = 0.25

Interval = tuple[float, float, float]  # estimate, low, high


def listed(interval: Interval | None) -> list[float] | None:
    """An interval as JSON (None stays None)."""
    return list(interval) if interval is not None else None


def _quantile(rounds: int, confidence: float) -> float:
    return stats.t_quantile(1 - (1 - confidence) / 2, rounds - 1)


def _finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def mean(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The mean of per-round values with its t interval (None under 2 rounds)."""
    if len(values) < 2 or not _finite(values):
        return None
    centre = statistics.fmean(values)
    half = _quantile(len(values), confidence) * statistics.stdev(values) / math.sqrt(len(values))
    return (centre, centre - half, centre + half)


def ratio(
    parts: Sequence[float], wholes: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """``mean(parts) / mean(wholes)`` with Fieller's interval, ``parts[i]`` and
    ``wholes[i]`` measured in the same round. None when the wholes' own t interval holds
    0 (the interval would be unbounded: these rounds did not show the change)."""
    n = len(wholes)
    if n < 2 or len(parts) != n or not _finite([*parts, *wholes]):
        return None
    part, whole = statistics.fmean(parts), statistics.fmean(wholes)
    var_part, var_whole = statistics.variance(parts), statistics.variance(wholes)
    cov = statistics.covariance(parts, wholes)
    q = _quantile(n, confidence) ** 2 / n
    # (part - s * whole)^2 <= q * var(part - s * whole), a quadratic a s^2 - 2 b s + c <= 0
    a = whole * whole - q * var_whole
    b = part * whole - q * cov
    c = part * part - q * var_part
    if a <= 0:
        return None
    root = math.sqrt(max(b * b - a * c, 0.0))
    return (part / whole, (b - root) / a, (b + root) / a)


def material(share: Interval | None) -> bool:
    """Whether a share's interval lies above :data:`MATERIAL` (see there for why)."""
    return share is not None and share[1] > MATERIAL


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
