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
- a benchmark stops as **same** when "same" is already shown (its interval at ``1 - fdr``
  sits inside the equivalence band, as the final verdict asks) *and* its estimate is under
  ``min_effect``: a true change that is still on its way to significance (a 3% slowdown
  after four groups) is thereby kept measuring instead of being settled inside the band;
- a benchmark stops as **undecidable** when, at the noise its groups show so far, even the
  last group would leave its interval more than ``futility`` bands wide (so "same" is out
  of reach), and the change seen so far would be found by the last group with probability
  under ``futility_power`` (conditional power under the current trend, the usual
  stochastic-curtailment rule): more groups would buy neither verdict. Its verdict stays
  "no-change-detected", with the reason. A large change in a noisy benchmark keeps going.
  Before ``futility_from`` groups the spread is rough (three degrees of freedom at four
  groups can overstate it by 1.8x one time in forty), so only a benchmark projected
  ``early_futility`` bands wide is given up on then: the gloo collectives on a busy
  two-core machine (projected +/-18 to 35% against a 5% band) stop at the first look
  instead of starting six more rank processes in each of two more groups.

Stops for "same" or undecidable can only remove rejections, so they cost no false alarms;
such a benchmark enters the final family with p = 1 (never rejected there), which keeps
Benjamini-Hochberg monotone. They can cost power, which the self-check measures
(``benchmarks/harness_selfcheck.py``).

Everything else (too noisy, no change detected yet, an A/A control that alarms) keeps
measuring until the last group or the budget. The stop is recorded with its group and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from torchcanary import stats
from torchcanary.bench.result import BenchVerdict
from torchcanary.bench.samples import BenchmarkSamples
from torchcanary.bench.verdicts import calibrated

# A benchmark's samples -> its comparisons ({"ab": ..., "aa": ...}), as the run makes them.
PairOf = Callable[[BenchmarkSamples], dict[str, Any]]
# Comparisons of a family, an FDR -> verdicts.decide's verdicts, with the run's other settings.
Decide = Callable[[dict[str, dict[str, Any]], float], dict[str, dict[str, Any]]]

# What each interim look may spend on early "slower"/"faster", as a share of the FDR.
EFFICACY_SHARE = 0.01
# Fewer groups than this give a trimmed t with too few degrees of freedom to mean much.
FIRST_LOOK = 4
# Undecidable: the last group's interval would still be this many bands wide ...
FUTILITY_BANDS = 1.0
# ... and the last group would find the change seen so far with less than this chance ...
FUTILITY_POWER = 0.05
# ... judged from this many groups on: the spread of fewer is too rough to project ...
FUTILITY_FROM = 6
# ... except where it is far out: before FUTILITY_FROM, this many bands.
EARLY_FUTILITY_BANDS = 2.0


@dataclass(frozen=True)
class StopRule:
    """What an interim look may settle, besides the run's FDR and band."""

    groups: int  # the schedule's last group
    min_effect: float  # "same" early only for an estimate under this (verdicts.decide's)
    efficacy_share: float = EFFICACY_SHARE
    futility: float = FUTILITY_BANDS
    futility_power: float = FUTILITY_POWER
    futility_from: int = FUTILITY_FROM
    early_futility: float = EARLY_FUTILITY_BANDS


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
    rule: StopRule,
) -> dict[str, Stop]:
    """The benchmarks whose verdict is settled at this look.

    ``decided`` is :func:`verdicts.decide` on the samples so far at the run's ``fdr``, and
    ``half_band`` the equivalence band "same" must fit (as ``decide`` used it).
    """
    tested = sum(1 for result in decided.values() if (result.get("ab") or {}).get("testable"))
    bar = rule.efficacy_share * fdr / max(tested, 1)
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
        elif verdict is BenchVerdict.SAME:
            if abs(ab["log_ratio"]) <= math.log1p(rule.min_effect):
                low, high = result["equivalence_interval"]
                stops[bench_id] = Stop(
                    groups,
                    verdict,
                    f"shown equivalent after {groups} groups: {1 - fdr:.0%} interval "
                    f"[{low:.3f}, {high:.3f}] within ±{half_band:.0%}, estimate "
                    f"{ab['ratio']:.3f} under the {rule.min_effect:.0%} floor",
                )
        elif verdict is BenchVerdict.NO_CHANGE_DETECTED:
            bands = rule.futility if groups >= rule.futility_from else rule.early_futility
            width = _projected_half_width(ab, groups, rule.groups, fdr)
            power = _conditional_power(ab, groups, rule.groups, fdr)
            if width > bands * half_band and power < rule.futility_power:
                bar_text = (
                    f"the ±{half_band:.0%}" if bands == 1 else f"{bands:g}x the ±{half_band:.0%}"
                )
                stops[bench_id] = Stop(
                    groups,
                    verdict,
                    f"stopped after {groups} groups as undecidable here: at this noise all "
                    f"{rule.groups} groups would leave a {1 - fdr:.0%} interval about "
                    f"±{width:.0%} wide, wider than {bar_text} that matters, and would "
                    f"find the change seen so far "
                    f"({ab['ratio'] - 1:+.1%}) with probability {power:.0%}",
                )
    return stops


def _projected_half_width(ab: dict[str, Any], groups: int, total: int, fdr: float) -> float:
    """The interval's half-width (a fraction) after ``total`` groups at the noise seen now.

    The standard error shrinks as the square root of the groups; the quantile is the one
    the last group would use. An estimate from few groups is itself rough, so a benchmark
    given up on might, by luck in its noise, still have shown "same" by the last group (in
    simulations like those of ``tests/test_bench_sequential.py``, 2 of the 17 that did
    at 4-6% process noise); it is then "no-change-detected", which blocks nothing either.
    """
    se = ab.get("se_log", math.inf)
    if not math.isfinite(se):
        return math.inf
    projected = se * math.sqrt(groups / total)
    return math.expm1(stats.t_quantile(1 - fdr / 2, total - 1) * projected)


def _conditional_power(ab: dict[str, Any], groups: int, total: int, fdr: float) -> float:
    """The chance that all ``total`` groups find the change seen after ``groups``, if the
    true change is what was seen (conditional power under the current trend).

    With information growing as the groups, the final z is the interim one scaled by
    sqrt(total / groups) plus fresh noise of variance 1 - groups / total; it must pass the
    per-comparison bar at the run's FDR, the most lenient one Benjamini-Hochberg can give,
    so the rule errs toward measuring on.
    """
    se = ab.get("se_log", math.inf)
    if not math.isfinite(se) or se <= 0:
        return 1.0
    interim = abs(ab["log_ratio"]) / se
    bar = stats.t_quantile(1 - fdr / 2, total - 1)
    drift = interim * math.sqrt(total / groups) - bar
    return NormalDist().cdf(drift / math.sqrt(1 - groups / total))


def final_family(
    comparisons: dict[str, dict[str, Any]], stops: dict[str, Stop]
) -> dict[str, dict[str, Any]]:
    """The comparisons the final Benjamini-Hochberg step sees: a benchmark stopped as
    "same" or undecidable enters with p = 1, so it can be neither rejected nor make room
    for others."""
    family = {}
    for bench_id, pair in comparisons.items():
        stop = stops.get(bench_id)
        early_null = stop is not None and stop.verdict not in (
            BenchVerdict.SLOWER,
            BenchVerdict.FASTER,
        )
        if early_null and pair["ab"].get("testable"):
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
    rule: StopRule,
) -> dict[str, Stop]:
    """One interim look over every compared benchmark (settled ones too: they stay in the
    calibration and the family size); the stops it adds, for benchmarks not yet settled."""
    decided = decide({b: pair_of(s) for b, s in benchmarks.items()}, fdr)
    found = interim_stops(decided, groups, fdr, half_band, rule)
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
