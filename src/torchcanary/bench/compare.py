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

How the run decides (``decide``): first the A/A controls (the baseline measured twice by
separate workers, known nulls) calibrate the run: if their p-values are too small overall,
every A/B p-value and interval is widened by that factor (``calibration_factor``). Then
Benjamini-Hochberg q-values over every A/B comparison of the run; significant
(q <= fdr) means slower or faster. Otherwise "same" only when shown: the comparison's own
interval at ``1 - fdr`` (two one-sided tests at fdr / 2 each) fits within the equivalence
band, and that band is no wider than what the policy blocks on;
a bounded interval that does not fit is "no-change-detected" (it says how large a change
could hide), an unbounded one "too-noisy". Each benchmark's A/A control also gives its
minimum detectable effect (90% power at BH's threshold for a single change, after
calibration) and, when it is itself "significant" even after calibration, marks the
benchmark untrustworthy here. The verdict vocabulary is ``BenchVerdict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from torchcanary.bench import stats
from torchcanary.bench.samples import BenchmarkSamples
from torchcanary.worker.bench.specs import STEADY_KINDS

_HETEROGENEITY_P = 0.01
_MIN_GROUP_PAIRS = 6
_TRIM = 0.1  # Yuen: from 10 groups, the most extreme at each end is left out
_MIN_CONTROLS = 5
_CONTROLS_PRIOR = 20  # controls' worth of belief that the tests are calibrated
_NULL_MEDIAN_Z2 = 0.4549  # median of chi-square with 1 degree of freedom
_POWER = 0.9
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
    diffs = [d for _, d in pairs]
    by_group: dict[int, list[float]] = {}
    for (group, _round), d in pairs:
        by_group.setdefault(group, []).append(d)
    groups = list(by_group.values())
    reference_sets = 1
    if len(groups) < 2:
        judged = _one_group(diffs)
    elif all(len(g) >= _MIN_GROUP_PAIRS for g in groups):
        judged = _rank_and_random_effects(diffs, groups, confidence)
    else:
        pooled = _pooled_groups(samples, pairs, ref_centres, second_reference, clock)
        if pooled is not None:
            groups, reference_sets = pooled, 2
        judged = _across_group_summaries(groups, confidence, reference_sets)
    _u, unpaired_p = stats.mann_whitney_u(
        samples.times(reference, clock), samples.times(other, clock)
    )
    return {
        "testable": True,
        "pairs": len(diffs),
        "groups": len(by_group),
        "reference_sets": reference_sets,
        "method": judged.method,
        "ratio": math.exp(judged.estimate),
        "ci_low": _exp(judged.low),
        "ci_high": _exp(judged.high),
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


def _exp(value: float) -> float:
    return math.exp(value) if math.isfinite(value) else (math.inf if value > 0 else 0.0)


def mde_from_aa(
    aa: dict[str, Any], alpha: float, inflation: float = 1.0, reference_sets: int = 1
) -> float | None:
    """Smallest slowdown found with 90% power, given the A/A control's noise (a fraction).

    ``aa`` is the control as measured (before calibration); ``alpha`` the two-sided level
    a single change must reach in this run (BH's threshold for one discovery among the
    run's comparisons: FDR / m). The run's calibration turns that into a stricter level on
    the uncalibrated test, and the group test's degrees of freedom set both quantiles (see
    ``stats.detectable_shift``), so "MDE 2%" means a true 2% change is called in 9 of 10
    runs like this one.
    """
    if not aa.get("testable") or not math.isfinite(aa["se_log"]) or not aa.get("df"):
        return None
    raw_alpha = stats.normal_two_sided_p(
        math.sqrt(max(inflation, 1.0)) * stats.normal_quantile(1 - alpha / 2)
    )
    shift = stats.detectable_shift(max(raw_alpha, 1e-300), _POWER, aa["df"])
    # The control differs two worker sets; a comparison against both baseline sets has
    # 3/4 of that variance (1 + 1/2 against 1 + 1).
    se = aa["se_log"] * (math.sqrt(0.75) if reference_sets == 2 else 1.0)
    return _exp(shift * se) - 1 if shift * se < 700 else math.inf


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


def calibration_factor(controls: list[dict[str, Any]]) -> float:
    """How much the run's A/A controls say its p-values overstate confidence (>= 1).

    Every A/A control is a known null measured exactly like the A/B comparisons, so its
    p-values should be uniform. Worker processes that are luckier than others (a few
    percent, for a whole process lifetime) make them too small. The median of the controls'
    z**2 over its null expectation (0.455) estimates that inflation, as genomic control does
    for association tests; A/B z-scores are divided by its square root.

    From a few controls that median is itself noisy (with 18 exact nulls it exceeds 1.9 in
    one run of ten), and every bit of excess costs power. So the estimate counts on the log
    scale by ``n / (n + 20)`` for ``n`` controls: the tests are built to be valid across
    worker groups, so an inflation needs many controls to be believed in full. Needs 5.
    """
    usable = [c for c in controls if c.get("testable")]
    if len(usable) < _MIN_CONTROLS:
        return 1.0
    squares = [_z_of(c["p_value"]) ** 2 for c in usable]
    estimate = stats.median(squares) / _NULL_MEDIAN_Z2
    if estimate <= 1.0:
        return 1.0
    weight = len(usable) / (len(usable) + _CONTROLS_PRIOR)
    return float(math.exp(weight * math.log(estimate)))


def _z_of(p_value: float) -> float:
    return -stats.normal_quantile(max(p_value, 1e-300) / 2) if p_value < 1 else 0.0


def calibrated(comparison: dict[str, Any] | None, inflation: float) -> dict[str, Any] | None:
    """A comparison with its p-value and interval widened by the A/A inflation factor."""
    if not comparison or not comparison.get("testable") or inflation <= 1.0:
        return comparison
    scale = math.sqrt(inflation)
    centre = comparison["log_ratio"]
    low, high = math.log(max(comparison["ci_low"], 1e-300)), math.log(comparison["ci_high"])
    return {
        **comparison,
        "p_value": stats.normal_two_sided_p(_z_of(comparison["p_value"]) / scale),
        "uncalibrated_p_value": comparison["p_value"],
        "ci_low": _exp(centre - (centre - low) * scale),
        "ci_high": _exp(centre + (high - centre) * scale),
        "se_log": comparison["se_log"] * scale,
    }


def at_level(comparison: dict[str, Any], measured: float, wanted: float) -> dict[str, Any]:
    """``comparison`` with its interval, measured at confidence ``measured``, re-stated at
    ``wanted`` on the same degrees of freedom (the per-comparison one is kept beside it)."""
    if not comparison.get("testable") or wanted <= measured:
        return comparison
    low, high = comparison["ci_low"], comparison["ci_high"]
    if not (low > 0 and math.isfinite(high)):
        return comparison
    df = comparison.get("df") or math.inf
    widen = stats.t_critical(1 - wanted, df) / stats.t_critical(1 - measured, df)
    centre = comparison["log_ratio"]
    return {
        **comparison,
        "ci_low": _exp(centre - (centre - math.log(low)) * widen),
        "ci_high": _exp(centre + (math.log(high) - centre) * widen),
        "ci_level": wanted,
        "ci_low_per_comparison": low,
        "ci_high_per_comparison": high,
    }


class BenchVerdict(str, Enum):
    """What a benchmark's comparison showed; the one vocabulary of the bench section."""

    FASTER = "faster"  # significant after BH, beyond the floor
    SLOWER = "slower"
    SAME = "same"  # shown equivalent: the interval fits a band smaller than what matters
    NO_CHANGE_DETECTED = "no-change-detected"  # not significant, not shown equivalent
    TOO_NOISY = "too-noisy"  # untestable, unbounded interval, or the A/A control alarmed
    SKIPPED = "skipped"  # did not run (or crashed) on a side

    def __str__(self) -> str:
        return self.value


def decide(
    comparisons: dict[str, dict[str, Any]],
    fdr: float,
    equivalence: float,
    aa_run: bool = False,
    min_effect: float = 0.01,
    inflation: float | None = None,
    max_slowdown: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Verdicts for all benchmarks of a run, with BH control over the run's comparisons.

    ``comparisons[bench_id]`` holds ``ab`` (the comparison that is judged) and optionally
    ``aa`` (the A/A control). In an A/A run (``aa_run``) the judged comparison is itself
    the A/A one and gives the MDE. ``max_slowdown`` is what matters to the user (the
    policy's ``bench_max_slowdown``): "same" needs the interval inside a band no wider than
    it, so "same" never hides a change the policy would block. A significant change under
    ``min_effect`` whose interval fits that band is "same" too. ``inflation`` fixes the
    calibration instead of taking it from these controls, so one benchmark can be judged
    alone (BH over one test: its worst case) as a larger run would.
    Returns, per benchmark, verdict (a BenchVerdict), q-values, MDE, calibration, reasons.
    """
    decided: dict[str, dict[str, Any]] = {}
    if inflation is None:
        inflation = (
            1.0
            if aa_run
            else calibration_factor([pair["aa"] for pair in comparisons.values() if pair.get("aa")])
        )
    measured = comparisons
    if inflation > 1.0:
        comparisons = {
            bench_id: {
                **pair,
                "ab": calibrated(pair["ab"], inflation),
                "aa": calibrated(pair.get("aa"), inflation),
            }
            for bench_id, pair in comparisons.items()
        }
    for role in ("ab", "aa"):
        ids = [b for b, c in comparisons.items() if (c.get(role) or {}).get("testable")]
        qs = stats.benjamini_hochberg([comparisons[b][role]["p_value"] for b in ids])
        for bench_id, q in zip(ids, qs, strict=True):
            decided.setdefault(bench_id, {})[f"q_{role}"] = q
    # BH's threshold for the first discovery among the run's m comparisons: what an MDE
    # must be measured against when this change is the only one.
    tested = sum(1 for c in comparisons.values() if c["ab"].get("testable"))
    single_alpha = fdr / max(tested, 1)
    # The interval shown is at the level the verdict was decided at: BH with R discoveries
    # among m rejects exactly the p-values under fdr * R / m, so intervals at that level
    # (Benjamini and Yekutieli's false-coverage-rate intervals) exclude "no change" where,
    # and only where, the verdict says there is one.
    discoveries = sum(1 for r in decided.values() if r.get("q_ab", 1.0) <= fdr)
    decision_alpha = fdr * max(discoveries, 1) / max(tested, 1)
    half_band = equivalence if max_slowdown is None else min(equivalence, max_slowdown)
    band = (1 / (1 + half_band), 1 + half_band)
    for bench_id, pair in comparisons.items():
        result = decided.setdefault(bench_id, {})
        result["calibration"] = inflation
        ab = at_level(pair["ab"], 1 - fdr, 1 - decision_alpha)
        result["ab"], result["aa"] = ab, pair.get("aa")
        result["equivalence_interval"] = _equivalence_interval(pair["ab"], fdr)
        aa = pair.get("aa") or {}
        control = measured[bench_id]["ab"] if aa_run else measured[bench_id].get("aa")
        result["mde"] = (
            mde_from_aa(control, single_alpha, inflation, pair["ab"].get("reference_sets", 1))
            if control
            else None
        )
        result["mde_alpha"] = single_alpha
        if not ab.get("testable"):
            result.update(
                verdict=BenchVerdict.TOO_NOISY, reasons=[ab.get("reason", "not testable")]
            )
            continue
        verdict, reasons = _verdict(result, ab, aa, fdr, band, half_band, min_effect)
        if verdict is BenchVerdict.SAME:
            # Shown at the level "same" was decided at, as every verdict's interval is.
            result["ab"] = pair["ab"]
        if max_slowdown is not None and verdict is BenchVerdict.NO_CHANGE_DETECTED:
            reach = max(ab["ci_high"] - 1, 1 / max(ab["ci_low"], 1e-300) - 1)
            reasons.append(
                f"changes up to {reach:.1%} are not ruled out"
                + (
                    f", beyond the {max_slowdown:.0%} that matters"
                    if reach > max_slowdown
                    else f", all under the {max_slowdown:.0%} that matters"
                )
            )
        mde = result["mde"]
        if max_slowdown is not None and mde is not None and mde > max_slowdown:
            # Load on the machine costs power; say so where it happened, not in a README.
            reasons.append(
                f"lost power here: the A/A control's noise hides changes under {mde:.1%} "
                f"(90% power), more than the {max_slowdown:.0%} that matters"
            )
        result.update(verdict=verdict, reasons=reasons)
    return decided


def _equivalence_interval(ab: dict[str, Any], fdr: float) -> tuple[float, float] | None:
    """The interval "same" is judged on: the comparison's own, at confidence ``1 - fdr``.

    Equivalence is two one-sided tests (TOST), each at ``fdr / 2``: "same" claims the
    change is inside the band, and a change just outside it passes for "same" at most that
    often. It is not widened for the run's other benchmarks as a discovery is: a wrong
    "same" cannot block a release, it can only miss a change the band already allows.
    """
    if not ab.get("testable"):
        return None
    low, high = ab["ci_low"], ab["ci_high"]
    return (low, high) if low > 0 and math.isfinite(high) else None


def _verdict(
    result: dict[str, Any],
    ab: dict[str, Any],
    aa: dict[str, Any],
    fdr: float,
    band: tuple[float, float],
    half_band: float,
    min_effect: float,
) -> tuple[BenchVerdict, list[str]]:
    interval = f"[{ab['ci_low']:.3f}, {ab['ci_high']:.3f}]"
    equivalence = result["equivalence_interval"]
    inside = equivalence is not None and band[0] <= equivalence[0] and equivalence[1] <= band[1]
    level = (
        f"{1 - fdr:.0%} interval [{equivalence[0]:.3f}, {equivalence[1]:.3f}]"
        if (equivalence)
        else "interval unbounded"
    )
    significant = result["q_ab"] <= fdr
    aa_alarm = bool(aa.get("testable") and result.get("q_aa", 1.0) <= fdr)
    if significant and inside and abs(math.log(ab["ratio"])) < math.log1p(min_effect):
        # Worker processes alone differ by about this much; a "difference" this small
        # is more likely process luck than the versions.
        return BenchVerdict.SAME, [
            f"q = {result['q_ab']:.2g}, but the change is under the {min_effect:.1%} "
            f"floor worker-process luck alone can produce, and its {level} is within "
            f"±{half_band:.0%}"
        ]
    if significant:
        verdict = BenchVerdict.SLOWER if ab["ratio"] > 1 else BenchVerdict.FASTER
        reasons = [f"q = {result['q_ab']:.2g} <= {fdr:g}, interval {interval}"]
        if aa_alarm and abs(ab["log_ratio"]) < 3 * abs(aa["log_ratio"]):
            return BenchVerdict.TOO_NOISY, [
                *reasons,
                f"but the A/A control also differed by {aa['ratio'] - 1:+.1%} "
                f"(q = {result['q_aa']:.2g}), so a change this size is not trustworthy here",
            ]
        return verdict, reasons
    if aa_alarm:
        return BenchVerdict.TOO_NOISY, [
            f"the A/A control differed by {aa['ratio'] - 1:+.1%} (q = {result['q_aa']:.2g})"
        ]
    if inside:
        return BenchVerdict.SAME, [f"shown equivalent: the {level} is within ±{half_band:.0%}"]
    if not (ab["ci_low"] > 0 and math.isfinite(ab["ci_high"])):
        return BenchVerdict.TOO_NOISY, [
            f"the interval is unbounded ({ab.get('method', 'too few data')}); more worker "
            "groups are needed"
        ]
    # The decision-level interval: wider than the one "same" was judged on, so it does not
    # fit either, and it includes 1 as a change not called must.
    return BenchVerdict.NO_CHANGE_DETECTED, [
        f"no change detected (q = {result['q_ab']:.2g}), but the interval {interval} is "
        f"wider than ±{half_band:.0%}: not shown equivalent"
    ]
