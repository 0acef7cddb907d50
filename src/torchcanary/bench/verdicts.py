"""From every comparison of a run to each benchmark's verdict (``decide``).

First the A/A controls (the baseline measured twice by
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
from typing import Any

from torchcanary import stats
from torchcanary.bench.compare import ratio_from_log
from torchcanary.bench.result import BenchVerdict

_MIN_CONTROLS = 5
_CONTROLS_PRIOR = 20  # controls' worth of belief that the tests are calibrated
_NULL_MEDIAN_Z2 = 0.4549  # median of chi-square with 1 degree of freedom
_POWER = 0.9


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
    return ratio_from_log(shift * se) - 1 if shift * se < 700 else math.inf


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
        "ci_low": ratio_from_log(centre - (centre - low) * scale),
        "ci_high": ratio_from_log(centre + (high - centre) * scale),
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
        "ci_low": ratio_from_log(centre - (centre - math.log(low)) * widen),
        "ci_high": ratio_from_log(centre + (math.log(high) - centre) * widen),
        "ci_level": wanted,
        "ci_low_per_comparison": low,
        "ci_high_per_comparison": high,
    }


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
    if inflation is None:
        controls = [pair["aa"] for pair in comparisons.values() if pair.get("aa")]
        inflation = 1.0 if aa_run else calibration_factor(controls)
    measured = comparisons
    if inflation > 1.0:
        comparisons = _calibrated_pairs(comparisons, inflation)
    decided = _q_values(comparisons)
    single_alpha, decision_alpha = _alphas(comparisons, decided, fdr)
    half_band = equivalence if max_slowdown is None else min(equivalence, max_slowdown)
    band = (1 / (1 + half_band), 1 + half_band)
    for bench_id, pair in comparisons.items():
        result = decided.setdefault(bench_id, {})
        result["calibration"] = inflation
        ab = at_level(pair["ab"], 1 - fdr, 1 - decision_alpha)
        result["ab"], result["aa"] = ab, pair.get("aa")
        result["equivalence_interval"] = _equivalence_interval(pair["ab"], fdr)
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
        aa = pair.get("aa") or {}
        verdict, reasons = _verdict(result, ab, aa, fdr, band, half_band, min_effect)
        if verdict is BenchVerdict.SAME:
            # Shown at the level "same" was decided at, as every verdict's interval is.
            result["ab"] = pair["ab"]
        if max_slowdown is not None:
            reasons += _against_what_matters(verdict, ab, result["mde"], max_slowdown)
        result.update(verdict=verdict, reasons=reasons)
    return decided


def _calibrated_pairs(
    comparisons: dict[str, dict[str, Any]], inflation: float
) -> dict[str, dict[str, Any]]:
    """Every benchmark's comparisons, A/B and A/A, widened by the run's calibration."""
    return {
        bench_id: {
            **pair,
            "ab": calibrated(pair["ab"], inflation),
            "aa": calibrated(pair.get("aa"), inflation),
        }
        for bench_id, pair in comparisons.items()
    }


def _alphas(
    comparisons: dict[str, dict[str, Any]], decided: dict[str, dict[str, Any]], fdr: float
) -> tuple[float, float]:
    """The level an MDE is measured at, and the level the verdicts were decided at."""
    # BH's threshold for the first discovery among the run's m comparisons: what an MDE
    # must be measured against when this change is the only one.
    tested = sum(1 for c in comparisons.values() if c["ab"].get("testable"))
    # The interval shown is at the level the verdict was decided at: BH with R discoveries
    # among m rejects exactly the p-values under fdr * R / m, so intervals at that level
    # (Benjamini and Yekutieli's false-coverage-rate intervals) exclude "no change" where,
    # and only where, the verdict says there is one.
    discoveries = sum(1 for r in decided.values() if r.get("q_ab", 1.0) <= fdr)
    return fdr / max(tested, 1), fdr * max(discoveries, 1) / max(tested, 1)


def _q_values(comparisons: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Benjamini-Hochberg q-values over the run's testable A/B comparisons (``q_ab``), and
    apart over its A/A controls (``q_aa``), by benchmark."""
    decided: dict[str, dict[str, Any]] = {}
    for role in ("ab", "aa"):
        ids = [b for b, c in comparisons.items() if (c.get(role) or {}).get("testable")]
        qs = stats.benjamini_hochberg([comparisons[b][role]["p_value"] for b in ids])
        for bench_id, q in zip(ids, qs, strict=True):
            decided.setdefault(bench_id, {})[f"q_{role}"] = q
    return decided


def _against_what_matters(
    verdict: BenchVerdict, ab: dict[str, Any], mde: float | None, max_slowdown: float
) -> list[str]:
    """What a verdict means against the policy's ``bench_max_slowdown``: how large a change
    "no change detected" leaves open, and whether the machine's noise hid what matters."""
    reasons = []
    if verdict is BenchVerdict.NO_CHANGE_DETECTED:
        reach = max(ab["ci_high"] - 1, 1 / max(ab["ci_low"], 1e-300) - 1)
        reasons.append(
            f"changes up to {reach:.1%} are not ruled out"
            + (
                f", beyond the {max_slowdown:.0%} that matters"
                if reach > max_slowdown
                else f", all under the {max_slowdown:.0%} that matters"
            )
        )
    if mde is not None and mde > max_slowdown:
        # Load on the machine costs power; say so where it happened, not in a README.
        reasons.append(
            f"lost power here: the A/A control's noise hides changes under {mde:.1%} "
            f"(90% power), more than the {max_slowdown:.0%} that matters"
        )
    return reasons


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
