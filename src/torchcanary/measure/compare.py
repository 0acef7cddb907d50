"""From raw samples to a verdict: one side against another, then all benchmarks together.

How one comparison is made (``compare_sides``):
1. each batch is reduced to its median, and each round pairs the two sides' batches, which
   ran back to back in random order: ``d = ln(other) - ln(reference)`` per round cancels
   the machine's drift;
2. the ratio is ``exp`` of the Hodges-Lehmann estimate of ``d`` (the median of Walsh
   averages, a robust centre), its interval Tukey's distribution-free one, and the test
   the Wilcoxon signed-rank test, which that interval inverts;
3. the round groups (separate worker processes) must agree: each group's estimate is
   combined in a DerSimonian-Laird random-effects model (tested with Student's t on
   groups - 1 degrees of freedom), whose between-group spread widens the interval when one
   process was luckier than another; the verdict takes the larger p-value and the envelope
   of both intervals, so it stands only if both views agree. With a single group nothing
   can be significant: one process per side cannot separate its luck from a difference;
4. with fewer than 10 pairs (one-shot benchmarks) it is a t-test on ``d``, because a rank
   test cannot reach small p-values there.

How the run decides (``decide``): first the A/A controls (the baseline measured twice by
separate workers, known nulls) calibrate the run: if their p-values are too small overall,
every A/B p-value and interval is widened by that factor (``calibration_factor``). Then
Benjamini-Hochberg q-values over every A/B comparison of the run; significant
(q <= fdr) means slower or faster; otherwise "same" when the interval
fits within the equivalence band, else "too noisy to tell". Each benchmark's A/A control
also gives its minimum detectable effect and, when it is itself "significant" even after
calibration, marks the benchmark untrustworthy here.
"""

from __future__ import annotations

import math
from typing import Any

from torchcanary.measure import stats
from torchcanary.measure.samples import BenchmarkSamples
from torchcanary.measure.specs import STEADY_KINDS

_MIN_RANK_PAIRS = 10
_HETEROGENEITY_P = 0.01
_MIN_GROUP_PAIRS = 6
_MIN_CONTROLS = 5
_NULL_MEDIAN_Z2 = 0.4549  # median of chi-square with 1 degree of freedom
_POWER = 0.9
_PLOT_POINTS = 120


def _batch_centres(
    samples: BenchmarkSamples, side: str, clock: str
) -> dict[tuple[int, int], float]:
    return {
        (b.group, b.round): stats.median(b.values(clock))
        for b in samples.batches.get(side, [])
        if b.times_s
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
        if t > 0
    ]
    return stats.median(shares) if shares else None


def summary(samples: BenchmarkSamples, side: str, clock: str = "wall") -> dict[str, Any]:
    """What the report shows of one side: centre, spread, and points to plot."""
    times = samples.times(side, clock)
    if not times:
        return {"n": 0}
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


def compare_sides(
    samples: BenchmarkSamples,
    reference: str,
    other: str,
    confidence: float,
    clock: str = "wall",
) -> dict[str, Any]:
    """Ratio other/reference with interval and p-value, by the method the data allows."""
    ref_centres = _batch_centres(samples, reference, clock)
    other_centres = _batch_centres(samples, other, clock)
    keys = sorted(set(ref_centres) & set(other_centres))
    pairs = [
        (k, math.log(other_centres[k]) - math.log(ref_centres[k]))
        for k in keys
        if ref_centres[k] > 0 and other_centres[k] > 0
    ]
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
    z = stats.normal_quantile(1 - (1 - confidence) / 2)
    heterogeneity_p, tau = 1.0, 0.0
    if len(diffs) < _MIN_RANK_PAIRS:
        estimate, p_value, low, high = stats.one_sample_t(diffs, confidence)
        method = f"paired t-test on {len(diffs)} log ratios (too few for a rank test)"
    else:
        estimate, low, high = stats.hodges_lehmann_one_sample(diffs, confidence)
        _w, p_value = stats.wilcoxon_signed_rank(diffs)
        method = f"Wilcoxon signed-rank on {len(diffs)} round-paired log ratios"
        groups = [g for g in by_group.values() if len(g) >= _MIN_GROUP_PAIRS]
        if len(groups) >= 2:
            # Confirm across worker groups: significant only if both agree, and the
            # interval is the envelope of both, so process-to-process luck cannot pass
            # for a difference between versions. With few groups the between-group
            # spread is itself uncertain, hence Student's t with groups - 1 degrees.
            pooled, se, tau2, heterogeneity_p = stats.random_effects(
                [stats.hodges_lehmann_one_sample(g, 0.5)[0] for g in groups],
                [_group_se(g) for g in groups],
            )
            tau = math.sqrt(tau2)
            df = len(groups) - 1
            group_p = stats.t_two_sided_p(pooled / se, df) if se > 0 else 1.0
            p_value = max(p_value, group_p)
            half = stats.t_quantile(1 - (1 - confidence) / 2, df) * se
            low, high = min(low, pooled - half), max(high, pooled + half)
            method += (
                f", confirmed across {len(groups)} worker groups (random effects, "
                f"between-group spread {tau:.2%})"
            )
        else:
            # One process per side: its luck and the versions' difference are the same
            # number, so the test cannot be passed (the interval still says how close).
            p_value = 1.0
            method += (
                "; one worker group cannot tell process luck from a difference"
                if len(by_group) < 2
                else f"; fewer than two groups with {_MIN_GROUP_PAIRS}+ rounds, too few "
                "to tell process luck from a difference"
            )
    se_log = (high - low) / (2 * z) if math.isfinite(high - low) else math.inf
    _u, unpaired_p = stats.mann_whitney_u(
        samples.times(reference, clock), samples.times(other, clock)
    )
    return {
        "testable": True,
        "pairs": len(diffs),
        "groups": len(by_group),
        "method": method,
        "ratio": math.exp(estimate),
        "ci_low": _exp(low),
        "ci_high": _exp(high),
        "log_ratio": estimate,
        "se_log": se_log,
        "p_value": p_value,
        "heterogeneity_p": heterogeneity_p,
        "between_group_spread": tau,
        "mann_whitney_p": unpaired_p,
        "clock": clock,
        "ratio_of_medians": stats.median(samples.times(other, clock))
        / stats.median(samples.times(reference, clock)),
    }


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


def mde_from_aa(aa: dict[str, Any], fdr: float) -> float | None:
    """Smallest effect detected with 90% power at this FDR, given the A/A noise."""
    if not aa.get("testable") or not math.isfinite(aa["se_log"]):
        return None
    z = stats.normal_quantile(1 - fdr / 2) + stats.normal_quantile(_POWER)
    return math.exp(z * aa["se_log"]) - 1


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
    for association tests; A/B z-scores are divided by its square root. Needs 5 controls.
    """
    usable = [c for c in controls if c.get("testable")]
    if len(usable) < _MIN_CONTROLS:
        return 1.0
    squares = [_z_of(c["p_value"]) ** 2 for c in usable]
    return max(1.0, stats.median(squares) / _NULL_MEDIAN_Z2)


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


def decide(
    comparisons: dict[str, dict[str, Any]],
    fdr: float,
    equivalence: float,
    aa_run: bool = False,
    min_effect: float = 0.01,
    inflation: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Verdicts for all benchmarks of a run, with BH control over the run's comparisons.

    ``comparisons[bench_id]`` holds ``ab`` (the comparison that is judged) and optionally
    ``aa`` (the A/A control). In an A/A run (``aa_run``) the judged comparison is itself
    the A/A one and gives the MDE. A significant change under ``min_effect`` is "same".
    ``inflation`` fixes the calibration instead of taking it from these controls, so one
    benchmark can be judged alone (BH over one test: its worst case) as a larger run would.
    Returns, per benchmark, verdict, q-values, MDE, calibration, reasons.
    """
    decided: dict[str, dict[str, Any]] = {}
    if inflation is None:
        inflation = (
            1.0
            if aa_run
            else calibration_factor([pair["aa"] for pair in comparisons.values() if pair.get("aa")])
        )
    if inflation > 1.0:
        comparisons = {
            bench_id: {
                **pair,
                "ab": calibrated(pair["ab"], inflation),
                "aa": calibrated(pair["aa"], inflation),
            }
            for bench_id, pair in comparisons.items()
        }
    for role in ("ab", "aa"):
        ids = [b for b, c in comparisons.items() if c.get(role, {}).get("testable")]
        qs = stats.benjamini_hochberg([comparisons[b][role]["p_value"] for b in ids])
        for bench_id, q in zip(ids, qs, strict=True):
            decided.setdefault(bench_id, {})[f"q_{role}"] = q
    band = (1 / (1 + equivalence), 1 + equivalence)
    for bench_id, pair in comparisons.items():
        result = decided.setdefault(bench_id, {})
        result["calibration"] = inflation
        result["ab"], result["aa"] = pair["ab"], pair.get("aa")
        ab, aa = pair["ab"], pair.get("aa") or {}
        control = ab if aa_run else aa
        result["mde"] = mde_from_aa(control, fdr) if control else None
        reasons: list[str] = []
        if not ab.get("testable"):
            result.update(verdict="too-noisy", reasons=[ab.get("reason", "not testable")])
            continue
        significant = result["q_ab"] <= fdr
        aa_alarm = bool(aa.get("testable") and result.get("q_aa", 1.0) <= fdr)
        if significant and abs(math.log(ab["ratio"])) < math.log1p(min_effect):
            # Worker processes alone differ by about this much; a "difference" this small
            # is more likely process luck than the versions.
            verdict = "same"
            reasons.append(
                f"q = {result['q_ab']:.2g}, but the change is under the "
                f"{min_effect:.1%} floor worker-process luck alone can produce"
            )
        elif significant:
            verdict = "slower" if ab["ratio"] > 1 else "faster"
            reasons.append(f"q = {result['q_ab']:.2g} <= {fdr:g}")
            if aa_alarm and abs(ab["log_ratio"]) < 3 * abs(aa["log_ratio"]):
                verdict = "too-noisy"
                reasons.append(
                    f"but the A/A control also differed by {aa['ratio'] - 1:+.1%} "
                    f"(q = {result['q_aa']:.2g}), so a change this size is not "
                    "trustworthy here"
                )
        elif aa_alarm:
            verdict = "too-noisy"
            reasons.append(
                f"the A/A control differed by {aa['ratio'] - 1:+.1%} (q = {result['q_aa']:.2g})"
            )
        elif band[0] <= ab["ci_low"] and ab["ci_high"] <= band[1]:
            verdict = "same"
            reasons.append(f"interval within ±{equivalence:.0%}")
        else:
            verdict = "too-noisy"
            reasons.append(
                f"not significant, and the interval [{ab['ci_low']:.3f}, "
                f"{ab['ci_high']:.3f}] is wider than ±{equivalence:.0%}"
            )
        result.update(verdict=verdict, reasons=reasons)
    return decided
