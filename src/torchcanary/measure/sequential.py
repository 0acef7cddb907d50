"""Sequential verdicts: look at the evidence between worker groups and stop measuring a
benchmark as soon as its verdict is settled, so the time goes where it is still needed.

Looking early and stopping on what the samples say would, done naively, raise the false-alarm
rate (each look is another chance for noise to cross the line). The rule here keeps the
run's guarantees with a Haybittle-Peto split of the error budget, which holds whatever the
correlation between looks:

- at an interim look a benchmark stops as **slower/faster** only when its calibrated p-value
  is under ``efficacy_share * fdr / m`` (m = benchmarks compared), a Bonferroni bar so high
  that only large changes meet it early; the union bound over looks spends at most
  ``len(looks) * efficacy_share`` of the FDR budget this way;
- the final look judges everything with Benjamini-Hochberg at the FDR left over
  (:func:`final_fdr`), so early stops plus the final family stay within ``fdr``;
- a benchmark stops as **same** when its interval, at the level the final verdict would use
  with no discoveries (``1 - fdr / m``), already sits inside the equivalence band. Stopping
  for equivalence can only remove rejections, so it costs no false alarms; and it enters the
  final family with p = 1 (never rejected there), which keeps Benjamini-Hochberg monotone.

Everything else (too noisy, no change detected yet, an A/A control that alarms) keeps
measuring until the last group or the budget. The stop is recorded with its group and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchcanary.measure.compare import BenchVerdict, at_level, calibrated
from torchcanary.measure.samples import BenchmarkSamples

# A benchmark's samples -> its comparisons ({"ab": ..., "aa": ...}), as the run makes them.
PairOf = Callable[[BenchmarkSamples], dict[str, Any]]
# Comparisons of a family, an FDR -> compare.decide's verdicts, with the run's other settings.
Decide = Callable[[dict[str, dict[str, Any]], float], dict[str, dict[str, Any]]]

# What each interim look may spend on early "slower"/"faster", as a share of the FDR.
EFFICACY_SHARE = 0.01
# Fewer groups than this give a trimmed t with too few degrees of freedom to mean much.
FIRST_LOOK = 4


@dataclass(frozen=True)
class Stop:
    """Why a benchmark stopped before the last group."""

    groups: int  # worker groups measured when it stopped
    verdict: BenchVerdict
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"groups": self.groups, "verdict": self.verdict.value, "reason": self.reason}


def look_points(groups: int, first: int = FIRST_LOOK, every: int = 2) -> tuple[int, ...]:
    """Group counts with an interim look: ``first``, then every ``every``, before the last."""
    return tuple(range(first, groups, every))


def final_fdr(fdr: float, looks: int, share: float = EFFICACY_SHARE) -> float:
    """The FDR the final Benjamini-Hochberg step may use after ``looks`` interim looks."""
    return fdr * (1.0 - looks * share)


def interim_stops(
    decided: dict[str, dict[str, Any]],
    groups: int,
    fdr: float,
    half_band: float,
    share: float = EFFICACY_SHARE,
) -> dict[str, Stop]:
    """The benchmarks whose verdict is settled at this look.

    ``decided`` is :func:`compare.decide` on the samples so far at the run's ``fdr``, and
    ``half_band`` the equivalence band "same" must fit (as ``decide`` used it).
    """
    tested = sum(1 for result in decided.values() if (result.get("ab") or {}).get("testable"))
    bar = share * fdr / max(tested, 1)
    strictest = 1 - fdr / max(tested, 1)
    stops = {}
    for bench_id, result in decided.items():
        ab, verdict = result.get("ab") or {}, result.get("verdict")
        if not ab.get("testable"):
            continue
        if verdict in (BenchVerdict.SLOWER, BenchVerdict.FASTER) and ab["p_value"] < bar:
            interval = f"[{ab['ci_low']:.3f}, {ab['ci_high']:.3f}]"
            stops[bench_id] = Stop(
                groups,
                verdict,
                f"decided after {groups} groups: p = {ab['p_value']:.2g} under the early "
                f"bar {bar:.2g}, interval {interval}",
            )
            continue
        if verdict is not BenchVerdict.SAME:
            continue
        strict = at_level(ab, ab.get("ci_level", 1 - fdr), strictest)
        low, high = strict["ci_low"], strict["ci_high"]
        if 1 / (1 + half_band) <= low and high <= 1 + half_band:
            stops[bench_id] = Stop(
                groups,
                verdict,
                f"shown equivalent after {groups} groups: interval [{low:.3f}, {high:.3f}] "
                f"at {strictest:.2%} within ±{half_band:.0%}",
            )
    return stops


def final_family(
    comparisons: dict[str, dict[str, Any]], stops: dict[str, Stop]
) -> dict[str, dict[str, Any]]:
    """The comparisons the final Benjamini-Hochberg step sees: a benchmark stopped as
    "same" enters with p = 1, so it can be neither rejected nor make room for others."""
    family = {}
    for bench_id, pair in comparisons.items():
        stop = stops.get(bench_id)
        if stop is not None and stop.verdict is BenchVerdict.SAME and pair["ab"].get("testable"):
            pair = {**pair, "ab": {**pair["ab"], "p_value": 1.0}}
        family[bench_id] = pair
    return family


def apply_stops(
    decided: dict[str, dict[str, Any]],
    comparisons: dict[str, dict[str, Any]],
    stops: dict[str, Stop],
) -> None:
    """Give each stopped benchmark the verdict and reason of its stop, its measured p-value
    back, and the record of when it stopped (``decided`` is the final family's verdicts)."""
    for bench_id, stop in stops.items():
        result = decided[bench_id]
        measured = calibrated(comparisons[bench_id]["ab"], result["calibration"]) or {}
        result["ab"] = {**result["ab"], "p_value": measured.get("p_value")}
        result.update(verdict=stop.verdict, reasons=[stop.reason], stopped=stop.to_json())


def look(
    benchmarks: dict[str, BenchmarkSamples],
    groups: int,
    settled: dict[str, Stop],
    pair_of: PairOf,
    decide: Decide,
    fdr: float,
    half_band: float,
) -> dict[str, Stop]:
    """One interim look over every compared benchmark (settled ones too: they stay in the
    calibration and the family size); the stops it adds, for benchmarks not yet settled."""
    decided = decide({b: pair_of(s) for b, s in benchmarks.items()}, fdr)
    found = interim_stops(decided, groups, fdr, half_band)
    return {b: stop for b, stop in found.items() if b not in settled}


def judge(
    benchmarks: dict[str, BenchmarkSamples],
    settled: dict[str, Stop],
    pair_of: PairOf,
    decide: Decide,
    fdr: float,
    looks: int,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The final verdicts after ``looks`` interim looks, and the comparisons they rest on."""
    comparisons = {b: pair_of(s) for b, s in benchmarks.items()}
    decided = decide(final_family(comparisons, settled), final_fdr(fdr, looks))
    apply_stops(decided, comparisons, settled)
    return decided, comparisons
