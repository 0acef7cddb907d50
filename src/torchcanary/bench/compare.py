"""From raw samples to a verdict: one side against another, then all benchmarks together.

Worker groups (separate sets of worker processes) are the unit of inference: a process
can be a few percent luckier than another for its whole life, so pairs from one group
are not independent evidence. How one comparison is made (``compare_sides``):
1. each batch is reduced to its median, and each round pairs the two sides' batches, which
   ran back to back in random order: ``d = ln(other) - ln(reference)`` per round cancels
   the machine's drift;
2. with one worker group nothing can be significant and the interval is unbounded: one
   process per side cannot separate its luck from a difference;
3. when every group holds 6+ rounds (steady benchmarks): the ratio is ``exp`` of the
   Hodges-Lehmann estimate of ``d``, the Wilcoxon signed-rank test and Tukey's interval
   over the rounds, confirmed by a DerSimonian-Laird random-effects model over the groups'
   estimates (Student's t on groups - 1 degrees of freedom); the larger p-value and the
   envelope of both intervals stand;
4. otherwise (one-shot benchmarks at 1 sample per group, slow steady ones at a few rounds
   per group): each group's centre is one value, and Student's t across the groups on
   groups - 1 degrees of freedom gives the estimate, interval and p-value.
Samples that are empty, NaN, infinite or not positive make the comparison untestable,
with the reason; the run goes on.
How the run turns these comparisons into verdicts is ``bench/verdicts.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torchcanary import stats
from torchcanary.bench.samples import BenchmarkSamples
from torchcanary.worker.bench.specs import STEADY_KINDS

_HETEROGENEITY_P = 0.01
_MIN_GROUP_PAIRS = 6
_TRIM = 0.1  # Yuen: from 10 groups, the most extreme at each end is left out
_PLOT_POINTS = 120


def _batch_centres(
    samples: BenchmarkSamples, side: str, clock: str
) -> dict[tuple[int, int], float]:
    return {
        (b.group, b.round): stats.median(b.values(clock))
        for b in samples.batches.get(side, [])
        if b.values(clock)
    }


def clock_for(spec: dict[str, Any], threads: int, requested: str) -> str:
    """The clock a benchmark is judged on.

    ``auto`` picks process CPU time for single-threaded CPU compute: it does not count the
    time other processes held the core, which on a shared machine is most of the noise
    and none of the signal. Everything else (threads > 1, CUDA, sleeps, collectives,
    one-shot benchmarks) is judged on wall time (CUDA: device time between events).
    """
    if requested != "auto":
        return requested
    if (
        threads == 1
        and spec.get("device") == "cpu"
        and spec["kind"] in STEADY_KINDS
        and spec.get("op") != "sleep"
    ):
        return "cpu"
    return "wall"


def _on_cpu(samples: BenchmarkSamples, side: str) -> float | None:
    shares = [
        c / t
        for b in samples.batches.get(side, [])
        if b.cpu_s
        for c, t in zip(b.cpu_s, b.times_s, strict=True)
        if t > 0 and math.isfinite(c / t)
    ]
    return stats.median(shares) if shares else None


def summary(samples: BenchmarkSamples, side: str, clock: str = "wall") -> dict[str, Any]:
    """What the report shows of one side: centre, spread, and points to plot."""
    times = samples.times(side, clock)
    problem = stats.sample_problem(times)
    if problem:  # shown as such, not summarised: a broken timer has no centre or spread
        return {"n": 0, "problem": problem}
    ordered = sorted(times)
    step = max(1, len(ordered) // _PLOT_POINTS)
    return {
        "n": len(times),
        "median_s": stats.median(times),
        "q05_s": stats.quantile(times, 0.05),
        "q25_s": stats.quantile(times, 0.25),
        "q75_s": stats.quantile(times, 0.75),
        "q95_s": stats.quantile(times, 0.95),
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "robust_cv": stats.robust_cv(times),
        "on_cpu": _on_cpu(samples, side),
        "plot_s": ordered[::step][:_PLOT_POINTS],
    }


def compare_pair(
    samples: BenchmarkSamples,
    reference: str,
    judged: str,
    control: str | None,
    confidence: float,
    clock: str = "wall",
) -> dict[str, Any]:
    """A benchmark's judged comparison (``ab``) and, with a control side, its A/A (``aa``)."""
    pair = {"ab": compare_sides(samples, reference, judged, confidence, clock, control)}
    if control is not None:
        pair["aa"] = compare_sides(samples, reference, control, confidence, clock)
    return pair


def compare_sides(
    samples: BenchmarkSamples,
    reference: str,
    other: str,
    confidence: float,
    clock: str = "wall",
    second_reference: str | None = None,
) -> dict[str, Any]:
    """Ratio other/reference with interval and p-value, judged across worker groups.

    ``second_reference`` is another worker set of the reference's environment (the A/A
    control). Where each group holds only a few pairs (one-shot), the reference of a round
    is the geometric mean of both sets: the difference to it has 3/4 of the variance of the
    difference to one set, and it is uncorrelated with the A/A comparison of the two sets,
    so the control still checks the harness independently.
    """
    for side in (reference, other):
        problem = stats.sample_problem(samples.times(side, clock))
        if problem:
            return {"testable": False, "pairs": 0, "reason": f"side {side}: {problem}"}
    ref_centres = _batch_centres(samples, reference, clock)
    other_centres = _batch_centres(samples, other, clock)
    keys = sorted(set(ref_centres) & set(other_centres))
    pairs = [(k, math.log(other_centres[k]) - math.log(ref_centres[k])) for k in keys]
    if len(pairs) < 3:
        return {
            "testable": False,
            "pairs": len(pairs),
            "reason": f"only {len(pairs)} paired rounds; at least 3 are needed",
        }
    judged, groups, reference_sets = _judged(
        samples, pairs, ref_centres, second_reference, clock, confidence
    )
    _u, unpaired_p = stats.mann_whitney_u(
        samples.times(reference, clock), samples.times(other, clock)
    )
    return {
        "testable": True,
        "pairs": len(pairs),
        "groups": groups,
        "reference_sets": reference_sets,
        "method": judged.method,
        "ratio": math.exp(judged.estimate),
        "ci_low": ratio_from_log(judged.low),
        "ci_high": ratio_from_log(judged.high),
        "log_ratio": judged.estimate,
        "se_log": judged.se,
        "df": judged.df,
        "p_value": judged.p_value,
        "heterogeneity_p": judged.heterogeneity_p,
        "between_group_spread": judged.tau,
        "mann_whitney_p": unpaired_p,
        "clock": clock,
        "ratio_of_medians": stats.median(samples.times(other, clock))
        / stats.median(samples.times(reference, clock)),
    }


def _judged(
    samples: BenchmarkSamples,
    pairs: list[tuple[tuple[int, int], float]],
    ref_centres: dict[tuple[int, int], float],
    second_reference: str | None,
    clock: str,
    confidence: float,
) -> tuple[_Judged, int, int]:
    """The paired rounds judged as the worker groups allow (steps 2 to 4 of the module's
    docstring); with the number of groups and of reference worker sets it used."""
    diffs = [d for _, d in pairs]
    by_group: dict[int, list[float]] = {}
    for (group, _round), d in pairs:
        by_group.setdefault(group, []).append(d)
    groups = list(by_group.values())
    if len(groups) < 2:
        return _one_group(diffs), len(groups), 1
    if all(len(g) >= _MIN_GROUP_PAIRS for g in groups):
        return _rank_and_random_effects(diffs, groups, confidence), len(groups), 1
    pooled = _pooled_groups(samples, pairs, ref_centres, second_reference, clock)
    reference_sets = 1 if pooled is None else 2
    judged = _across_group_summaries(
        groups if pooled is None else pooled, confidence, reference_sets
    )
    return judged, len(groups), reference_sets


def _pooled_groups(
    samples: BenchmarkSamples,
    pairs: list[tuple[tuple[int, int], float]],
    ref_centres: dict[tuple[int, int], float],
    second_reference: str | None,
    clock: str,
) -> list[list[float]] | None:
    """Each pair's log ratio against both reference sets; None unless both cover every pair."""
    if second_reference is None or stats.sample_problem(samples.times(second_reference, clock)):
        return None
    second = _batch_centres(samples, second_reference, clock)
    if any(key not in second for key, _ in pairs):
        return None
    by_group: dict[int, list[float]] = {}
    for key, diff in pairs:
        # other - (ref + second) / 2 on the log scale, from other - ref
        pooled = diff - (math.log(second[key]) - math.log(ref_centres[key])) / 2
        by_group.setdefault(key[0], []).append(pooled)
    return list(by_group.values())


@dataclass(frozen=True)
class _Judged:
    """One comparison's figures on the log scale; ``se`` and ``df`` are the group test's."""

    estimate: float
    low: float
    high: float
    p_value: float
    se: float
    df: float
    method: str
    heterogeneity_p: float = 1.0
    tau: float = 0.0


def _one_group(diffs: list[float]) -> _Judged:
    # One process per side: its luck and the versions' difference are the same number, and
    # nothing measures how large that luck is, so no interval and no significance.
    estimate = stats.hodges_lehmann_one_sample(diffs, 0.5)[0]
    return _Judged(
        estimate,
        -math.inf,
        math.inf,
        1.0,
        math.inf,
        0.0,
        f"{len(diffs)} round-paired log ratios from one worker group, which cannot tell "
        "process luck from a difference",
    )


def _rank_and_random_effects(
    diffs: list[float], groups: list[list[float]], confidence: float
) -> _Judged:
    """Many rounds in every group: the rounds' rank test, confirmed across groups.

    Significant only if both agree, and the interval is the envelope of both, so
    process-to-process luck cannot pass for a difference between versions. With few groups
    the between-group spread is itself uncertain, hence Student's t with groups - 1 degrees.
    """
    estimate, low, high = stats.hodges_lehmann_one_sample(diffs, confidence)
    _w, p_value = stats.wilcoxon_signed_rank(diffs)
    pooled, se, tau2, heterogeneity_p = stats.random_effects(
        [stats.hodges_lehmann_one_sample(g, 0.5)[0] for g in groups],
        [_group_se(g) for g in groups],
    )
    tau = math.sqrt(tau2)
    df = len(groups) - 1
    group_p = stats.t_two_sided_p(pooled / se, df) if se > 0 else 1.0
    half = stats.t_quantile(1 - (1 - confidence) / 2, df) * se
    return _Judged(
        estimate,
        min(low, pooled - half),
        max(high, pooled + half),
        max(p_value, group_p),
        se,
        df,
        f"Wilcoxon signed-rank on {len(diffs)} round-paired log ratios, confirmed across "
        f"{len(groups)} worker groups (random effects, between-group spread {tau:.2%})",
        heterogeneity_p,
        tau,
    )


def _across_group_summaries(
    groups: list[list[float]], confidence: float, reference_sets: int = 1
) -> _Judged:
    """Few rounds per group (one-shot, slow steady): each group is one observation.

    Each group's log ratio (the Hodges-Lehmann centre of its rounds) is one value, a
    process's luck included, and Yuen's trimmed t on them judges the difference: from ten
    groups on, the most extreme group at each end is left out of the mean (its degrees of
    freedom paid for), so one preempted process neither fakes a difference nor hides one.
    """
    centres = [stats.hodges_lehmann_one_sample(g, 0.5)[0] for g in groups]
    estimate, p_value, low, high, se, df = stats.trimmed_t(centres, confidence, _TRIM)
    rounds = sorted({len(g) for g in groups})
    per_group = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
    trimmed = math.floor(_TRIM * len(groups))
    return _Judged(
        estimate,
        low,
        high,
        p_value,
        se,
        df,
        f"Student's t across {len(groups)} worker groups ({per_group} paired round(s) "
        f"each, one log ratio per group"
        + (f", {trimmed} trimmed at each end (Yuen)" if trimmed else "")
        + f", {df:g} degrees of freedom"
        + (", against both baseline worker sets" if reference_sets == 2 else "")
        + ")",
    )


def _group_se(differences: list[float]) -> float:
    """Standard error of one group's Hodges-Lehmann estimate, from its 95% interval."""
    _estimate, low, high = stats.hodges_lehmann_one_sample(differences, 0.95)
    if math.isfinite(high - low):
        return max((high - low) / (2 * 1.96), 1e-6)
    return max(
        stats.median([abs(d - stats.median(differences)) for d in differences])
        * 1.4826
        / math.sqrt(len(differences)),
        1e-6,
    )


def ratio_from_log(value: float) -> float:
    """``exp``, with an infinite log ratio an infinite or zero ratio rather than NaN."""
    return math.exp(value) if math.isfinite(value) else (math.inf if value > 0 else 0.0)


def noise_warnings(
    samples: BenchmarkSamples,
    sides: dict[str, dict[str, Any]],
    comparison: dict[str, Any],
    noise_cv: float,
) -> list[str]:
    warnings = []
    for name, side in sides.items():
        if side.get("n") and side["robust_cv"] > noise_cv:
            warnings.append(
                f"{name}: spread {side['robust_cv']:.0%} of the median (warn above {noise_cv:.0%})"
            )
        if side.get("on_cpu") is not None and side["on_cpu"] < 0.9:
            warnings.append(
                f"{name}: on a CPU only {side['on_cpu']:.0%} of the wall time; "
                "other processes competed for the cores"
            )
    for name, warmups in samples.warmups.items():
        unsettled = sum(not w.get("settled") for w in warmups)
        if unsettled:
            warnings.append(
                f"{name}: warm-up did not settle in {unsettled} of {len(warmups)} workers"
            )
    if comparison.get("heterogeneity_p", 1.0) < _HETEROGENEITY_P:
        warnings.append(
            "worker groups disagree beyond their own noise (Cochran's Q p = "
            f"{comparison['heterogeneity_p']:.2g}, spread "
            f"{comparison.get('between_group_spread', 0):.1%}): process-to-process "
            "variance is part of this figure; more groups would narrow it"
        )
    return warnings
