"""From structured samples to verdicts: ratio, interval, test choice, BH, A/A control."""

from __future__ import annotations

import math
import random

import pytest

from torchcanary import stats
from torchcanary.bench import compare, section, verdicts
from torchcanary.bench.result import BenchVerdict
from torchcanary.bench.samples import Batch, BenchmarkSamples


def _samples(
    shifts: dict[str, float],
    groups: int = 6,
    rounds: int = 20,
    seed: int = 1,
    group_offsets: dict[str, list[float]] | None = None,
    drift: float = 0.0,
) -> BenchmarkSamples:
    """Sides whose times differ by known factors; the machine drifts the same for all."""
    rng = random.Random(seed)
    samples = BenchmarkSamples("synthetic/x", {"kind": "synthetic", "device": "cpu"})
    for group in range(groups):
        for round_index in range(rounds):
            machine = math.exp(drift * math.sin(round_index + 7 * group))
            for slot, (side, shift) in enumerate(shifts.items()):
                offset = (group_offsets or {}).get(side, [0.0] * groups)[group]
                times = tuple(
                    1e-3 * machine * math.exp(shift + offset + rng.gauss(0, 0.01)) for _ in range(5)
                )
                samples.add(side, Batch(group, round_index, slot, times, times))
    return samples


def test_a_known_ten_percent_slowdown_is_estimated_and_significant() -> None:
    samples = _samples({"A": 0.0, "B": math.log(1.10)}, drift=0.3)
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert result["ratio"] == pytest.approx(1.10, rel=0.01)
    assert result["ci_low"] < 1.10 < result["ci_high"]
    assert result["p_value"] < 1e-6
    assert result["method"].startswith("Wilcoxon signed-rank")


def test_drift_shared_by_both_sides_cancels_in_the_paired_ratio() -> None:
    samples = _samples({"A": 0.0, "B": 0.0}, drift=0.5)
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert result["ci_low"] > 0.99 and result["ci_high"] < 1.01


def test_one_odd_worker_process_neither_fakes_nor_hides_a_difference() -> None:
    # Worker-process luck: the candidate's second process is 20% slower, the others not.
    odd = {"B": [0.0, 0.2, 0.0, 0.0, 0.0, 0.0]}
    null = compare.compare_sides(_samples({"A": 0.0, "B": 0.0}, group_offsets=odd), "A", "B", 0.99)
    assert null["heterogeneity_p"] < 0.01  # the groups do disagree
    assert "confirmed across 6 worker groups" in null["method"]
    assert null["p_value"] > 0.01 and null["ci_low"] < 1 < null["ci_high"]
    shifted = compare.compare_sides(
        _samples({"A": 0.0, "B": math.log(1.05)}, group_offsets=odd), "A", "B", 0.99
    )
    assert shifted["p_value"] < 1e-3 and shifted["ratio"] == pytest.approx(1.05, abs=0.01)


def test_processes_that_disagree_throughout_widen_the_interval() -> None:
    spread = {"B": [0.0, 0.04, -0.03, 0.05, -0.04, 0.01]}
    result = compare.compare_sides(
        _samples({"A": 0.0, "B": 0.0}, group_offsets=spread), "A", "B", 0.99
    )
    assert result["between_group_spread"] > 0.02
    assert result["p_value"] > 0.01 and result["ci_high"] / result["ci_low"] > 1.05


def test_a_significant_change_under_the_floor_is_same() -> None:
    assert _decide(_comparison(1.004, 1.002, 1.006, 1e-9))["verdict"] == "same"
    assert _decide(_comparison(1.004, 1.002, 1.006, 1e-9), min_effect=0.0)["verdict"] == "slower"


def test_groups_that_agree_keep_the_round_level_power() -> None:
    samples = _samples({"A": 0.0, "B": math.log(1.03)})
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert result["between_group_spread"] == pytest.approx(0, abs=0.005)
    assert result["p_value"] < 1e-6 and result["ci_low"] > 1.02


def test_one_worker_group_cannot_make_a_difference_significant() -> None:
    result = compare.compare_sides(_samples({"A": 0.0, "B": 0.2}, groups=1), "A", "B", 0.99)
    assert result["p_value"] == 1.0
    assert result["ratio"] == pytest.approx(math.exp(0.2), rel=0.01)
    # Nothing measures the process luck, so nothing bounds the interval either.
    assert (result["ci_low"], result["ci_high"]) == (0.0, math.inf)
    assert "one worker group" in result["method"]
    assert _decide(result)["verdict"] == "too-noisy"


@pytest.mark.parametrize("rounds", [3, 9, 20, 60])
def test_one_worker_group_is_never_significant_whatever_its_rounds(rounds: int) -> None:
    # Identical versions, but this candidate process is 3% luckier than its baseline: nine
    # rounds of a pooled t-test made that p = 5e-7 ("slower"); one group proves nothing.
    lucky = {"B": [0.03]}
    result = compare.compare_sides(
        _samples({"A": 0.0, "B": 0.0}, groups=1, rounds=rounds, group_offsets=lucky),
        "A",
        "B",
        0.99,
    )
    assert result["p_value"] == 1.0
    assert _decide(result)["verdict"] not in ("slower", "faster")


def _one_shot(
    shift: float, groups: int, process_luck: float, seed: int, rounds: int = 1
) -> BenchmarkSamples:
    """One fresh process per side and group; each process is luckier or not for life."""
    rng = random.Random(seed)
    samples = BenchmarkSamples("startup/x", {"kind": "startup", "device": "cpu"})
    for group in range(groups):
        luck = {side: rng.gauss(0, process_luck) for side in "AB"}
        for round_index in range(rounds):
            for slot, side in enumerate(rng.sample("AB", 2)):
                seconds = math.exp((shift if side == "B" else 0) + luck[side] + rng.gauss(0, 0.01))
                samples.add(side, Batch(group, round_index, slot, (seconds,)))
    return samples


@pytest.mark.parametrize("groups", [9, 12])
def test_a_thirty_percent_one_shot_slowdown_is_called_slower(groups: int) -> None:
    # The default one-shot layout, 12 groups x 1 sample, was forced to p = 1 ("too-noisy").
    result = compare.compare_sides(_one_shot(math.log(1.3), groups, 0.03, seed=3), "A", "B", 0.99)
    assert result["method"].startswith(f"Student's t across {groups} worker groups")
    assert result["ci_low"] > 1.15 and result["ci_high"] < 1.45
    assert _decide(result)["verdict"] == "slower"


def test_the_startup_figures_of_the_issue_get_the_verdict_their_interval_shows() -> None:
    # import_torch 857 ms vs 1.058 s in 12 groups x 1 sample: ratio about 1.23.
    result = compare.compare_sides(_one_shot(math.log(1.235), 12, 0.04, seed=8), "A", "B", 0.99)
    assert result["ci_low"] > 1.1
    assert _decide(result)["verdict"] == "slower"


def test_slow_steady_benchmarks_with_few_rounds_per_group_are_judged_across_groups() -> None:
    # Samples over ~80 ms leave 4 rounds or fewer per group; they hit the same p = 1 gate.
    samples = _samples({"A": 0.0, "B": math.log(1.1)}, groups=12, rounds=4)
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert result["method"].startswith("Student's t across 12 worker groups (4 paired")
    assert _decide(result)["verdict"] == "slower"


@pytest.mark.parametrize(("groups", "rounds"), [(12, 1), (3, 3), (6, 2)])
def test_few_rounds_per_group_keep_false_alarms_at_their_level(groups: int, rounds: int) -> None:
    # Identical versions whose processes differ by 3%: judged alone at FDR 1%, the pooled
    # t-test called 13% of 3 x 3 nulls different. Groups as the unit keep it near 1%.
    trials = 600
    alarms = sum(
        _decide(compare.compare_sides(_one_shot(0.0, groups, 0.03, seed, rounds), "A", "B", 0.99))[
            "verdict"
        ]
        in ("slower", "faster")
        for seed in range(trials)
    )
    assert alarms / trials <= 0.02


def test_one_preempted_process_neither_fakes_nor_hides_a_one_shot_difference() -> None:
    null, shifted = _one_shot(0.0, 12, 0.03, seed=5), _one_shot(math.log(1.2), 12, 0.03, seed=5)
    for samples in (null, shifted):  # group 4's candidate interpreter ran twice as long
        batch = samples.batches["B"][4]
        slow = (batch.times_s[0] * 2,)
        samples.batches["B"][4] = Batch(batch.group, batch.round, batch.slot, slow)
    assert _decide(compare.compare_sides(null, "A", "B", 0.99))["verdict"] != "slower"
    assert _decide(compare.compare_sides(shifted, "A", "B", 0.99))["verdict"] == "slower"


def test_too_few_pairs_is_not_testable_and_few_rounds_are_judged_per_group() -> None:
    assert not compare.compare_sides(
        _samples({"A": 0, "B": 0}, groups=1, rounds=2), "A", "B", 0.99
    )["testable"]
    few = compare.compare_sides(_samples({"A": 0, "B": 0.1}, groups=2, rounds=3), "A", "B", 0.99)
    assert few["method"].startswith("Student's t across 2 worker groups")
    assert few["df"] == 1


@pytest.mark.parametrize(
    ("bad", "words"),
    [(math.nan, "NaN"), (math.inf, "infinite"), (0.0, "zero or negative"), (-1e-3, "zero")],
)
def test_broken_samples_make_a_benchmark_untestable_with_the_reason(bad: float, words: str) -> None:
    samples = _samples({"A": 0.0, "B": 0.0}, groups=3, rounds=4)
    first = samples.batches["B"][0]
    samples.batches["B"][0] = Batch(first.group, first.round, first.slot, (bad, *first.times_s[1:]))
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert not result["testable"]
    assert words in result["reason"] and "side B" in result["reason"]
    assert compare.summary(samples, "B")["problem"] == stats.sample_problem(samples.times("B"))
    judged = _decide(result)
    assert judged["verdict"] == "too-noisy" and words in judged["reasons"][0]


def test_a_side_without_samples_is_untestable_not_an_error() -> None:
    samples = _samples({"A": 0.0}, groups=3, rounds=4)
    result = compare.compare_sides(samples, "A", "B", 0.99)
    assert not result["testable"] and "no samples" in result["reason"]


def test_cpu_clock_compares_cpu_times() -> None:
    samples = BenchmarkSamples("x", {"kind": "gemm", "device": "cpu"})
    for round_index in range(12):
        samples.add("A", Batch(0, round_index, 0, (1.0, 1.0), (0.5, 0.5)))
        samples.add("B", Batch(0, round_index, 1, (1.0, 1.0), (0.6, 0.6)))
    assert compare.compare_sides(samples, "A", "B", 0.99, "cpu")["ratio"] == pytest.approx(1.2)
    assert compare.compare_sides(samples, "A", "B", 0.99, "wall")["ratio"] == pytest.approx(1.0)


def test_auto_clock_uses_cpu_time_only_for_single_threaded_cpu_compute() -> None:
    gemm = {"kind": "gemm", "device": "cpu"}
    assert compare.clock_for(gemm, 1, "auto") == "cpu"
    assert compare.clock_for(gemm, 2, "auto") == "wall"
    assert compare.clock_for({**gemm, "device": "cuda"}, 1, "auto") == "wall"
    assert compare.clock_for({"kind": "startup", "device": "cpu"}, 1, "auto") == "wall"
    assert compare.clock_for(gemm, 1, "wall") == "wall"


def _decide(ab: dict, aa: dict | None = None, **kwargs: object) -> dict:
    pair = {"ab": ab} if aa is None else {"ab": ab, "aa": aa}
    return verdicts.decide({"x": pair}, 0.01, 0.05, **kwargs)["x"]


def _comparison(ratio: float, low: float, high: float, p: float, df: float = 11) -> dict:
    return {
        "testable": True,
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "log_ratio": math.log(ratio),
        "se_log": (math.log(high) - math.log(low)) / 5.15,
        "df": df,
    }


def test_verdicts_follow_significance_and_the_equivalence_band() -> None:
    assert _decide(_comparison(1.08, 1.05, 1.11, 1e-5))["verdict"] == "slower"
    assert _decide(_comparison(0.9, 0.88, 0.92, 1e-5))["verdict"] == "faster"
    assert _decide(_comparison(1.01, 0.98, 1.03, 0.4))["verdict"] == "same"
    # Not significant and not shown equivalent: said as such, with its interval.
    wide = _decide(_comparison(1.01, 0.8, 1.3, 0.4))
    assert wide["verdict"] == "no-change-detected"
    assert "[0.800, 1.300]" in wide["reasons"][0]
    unbounded = {**_comparison(1.01, 0.9, 1.1, 1.0), "ci_low": 0.0, "ci_high": math.inf}
    assert _decide(unbounded)["verdict"] == "too-noisy"


def test_verdicts_are_one_vocabulary_shared_with_the_section() -> None:
    decided = _decide(_comparison(1.08, 1.05, 1.11, 1e-5))
    assert isinstance(decided["verdict"], BenchVerdict)
    assert tuple(v.value for v in BenchVerdict) == section.VERDICTS
    assert "no-change-detected" in section.VERDICTS


def test_same_means_shown_within_a_band_no_wider_than_what_matters() -> None:
    # A true 2% regression measured as [0.995, 1.045]: within the 5% band, and below a 5%
    # policy, so "same" says nothing the policy would act on.
    regression = _comparison(1.02, 0.995, 1.045, 0.1)
    assert _decide(regression, max_slowdown=0.05)["verdict"] == "same"
    # A team that blocks on 2% is not told "same" about it: the band shrinks to what matters.
    stricter = _decide(regression, max_slowdown=0.02)
    assert stricter["verdict"] == "no-change-detected"
    assert "beyond the 2% that matters" in " ".join(stricter["reasons"])
    assert _decide(_comparison(1.0, 0.99, 1.012, 0.9), max_slowdown=0.02)["verdict"] == "same"
    # A significant change under the floor is "same" only when its interval fits the band.
    tiny = _comparison(1.004, 1.002, 1.006, 1e-9)
    assert _decide(tiny, max_slowdown=0.003)["verdict"] == "slower"


def test_an_alarming_aa_control_makes_a_small_change_untrustworthy() -> None:
    alarm = _comparison(1.04, 1.02, 1.06, 1e-5)
    small = _decide(_comparison(1.06, 1.04, 1.08, 1e-5), alarm)
    assert small["verdict"] == "too-noisy"
    assert "A/A control" in " ".join(small["reasons"])
    # A change far beyond what the A/A control showed still stands.
    assert _decide(_comparison(2.0, 1.9, 2.1, 1e-9), alarm)["verdict"] == "slower"


def test_mde_comes_from_the_aa_control_noise() -> None:
    quiet = _decide(_comparison(1.0, 1.0, 1.0, 0.5), _comparison(1.0, 0.99, 1.01, 0.9))
    noisy = _decide(_comparison(1.0, 1.0, 1.0, 0.5), _comparison(1.0, 0.9, 1.1, 0.9))
    assert 0 < quiet["mde"] < noisy["mde"]
    # One comparison at FDR 1%: a two-sided t at 0.01 on 11 df, 90% power (noncentral-t
    # approximation: 3.106 * (1 - 1/44) + 1.2816 * sqrt(1 + 3.106**2 / 22) = 4.57 SEs).
    se = math.log(1.01 / 0.99) / 5.15
    assert quiet["mde"] == pytest.approx(math.exp(4.57 * se) - 1, rel=0.005)


def test_mde_counts_the_bh_threshold_and_the_calibration() -> None:
    control = _comparison(1.0, 0.99, 1.01, 0.9)
    alone = _decide(_comparison(1.0, 1.0, 1.0, 0.5), control)["mde"]
    run = {f"b{i}": {"ab": _comparison(1.0, 0.99, 1.01, 0.5), "aa": control} for i in range(18)}
    among_18 = verdicts.decide(run, 0.01, 0.05)["b0"]
    assert among_18["mde_alpha"] == pytest.approx(0.01 / 18)
    assert among_18["mde"] > alone * 1.2
    calibrated = verdicts.decide(run, 0.01, 0.05, inflation=3.0)["b0"]["mde"]
    assert calibrated > among_18["mde"] * 1.3


def test_bh_spreads_the_false_discovery_budget_over_the_run() -> None:
    # Raw p = 0.008 passes 0.01 alone, but among six comparisons BH gives q = 0.008*6/2.
    run = {f"null{i}": {"ab": _comparison(1.0, 0.9, 1.1, 0.5)} for i in range(4)}
    run["borderline"] = {"ab": _comparison(1.1, 1.01, 1.2, 0.008)}
    run["clear"] = {"ab": _comparison(1.5, 1.4, 1.6, 1e-9)}
    decided = verdicts.decide(run, 0.01, 0.05)
    assert decided["clear"]["verdict"] == "slower"
    assert decided["borderline"]["q_ab"] == pytest.approx(0.024)
    assert decided["borderline"]["verdict"] == "no-change-detected"


def test_the_interval_shown_is_at_the_level_the_verdict_was_decided_at() -> None:
    # The borderline change's per-comparison 99% interval [1.01, 1.2] excludes 1, but BH over
    # the run does not call it: the interval it is reported with must include 1, and a
    # change the run does call keeps an interval that excludes 1.
    run = {f"null{i}": {"ab": _comparison(1.0, 0.9, 1.1, 0.5)} for i in range(4)}
    run["borderline"] = {"ab": _comparison(1.1, 1.01, 1.2, 0.008)}
    run["clear"] = {"ab": _comparison(1.5, 1.4, 1.6, 1e-9)}
    decided = verdicts.decide(run, 0.01, 0.05)
    for bench_id, result in decided.items():
        interval = (result["ab"]["ci_low"], result["ab"]["ci_high"])
        excludes_one = interval[0] > 1 or interval[1] < 1
        called = result["verdict"] in ("slower", "faster")
        assert excludes_one == called, (bench_id, interval, result["verdict"])
    borderline = decided["borderline"]["ab"]
    assert borderline["ci_level"] == pytest.approx(1 - 0.01 * 1 / 6)
    assert (borderline["ci_low_per_comparison"], borderline["ci_high_per_comparison"]) == (
        1.01,
        1.2,
    )
    assert "[1.010, 1.200]" not in " ".join(decided["borderline"]["reasons"])


def test_overdispersed_aa_controls_calibrate_the_ab_p_values_down() -> None:
    # Eleven A/A controls all at p = 0.001 (z = 3.29): median z**2 over 0.455 is 23.8, of
    # which 11 controls are believed to the power 11 / 31: 3.08. An A/B p-value of 1e-4
    # (z = 3.89) becomes z = 2.22, p = 0.027, and its interval widens.
    run = {
        f"b{i}": {
            "ab": _comparison(1.0, 0.99, 1.01, 0.5),
            "aa": _comparison(1.01, 1.004, 1.016, 0.001),
        }
        for i in range(10)
    }
    run["x"] = {
        "ab": _comparison(1.02, 1.01, 1.03, 1e-4),
        "aa": _comparison(1.0, 0.99, 1.01, 0.001),
    }
    decided = verdicts.decide(run, 0.01, 0.05)
    assert decided["x"]["calibration"] == pytest.approx(23.8 ** (11 / 31), rel=0.01)
    assert decided["x"]["ab"]["p_value"] == pytest.approx(0.027, abs=0.002)
    assert decided["x"]["ab"]["uncalibrated_p_value"] == 1e-4
    assert decided["x"]["ab"]["ci_high"] > 1.035
    assert decided["x"]["verdict"] == "same"  # [1.003, 1.037]: not significant, within 5%


def test_a_few_nearly_calibrated_controls_cannot_swing_the_calibration() -> None:
    # 18 controls whose median z**2 is 3.3 times its null value: with 18 exact nulls that
    # happens by chance in about one run of fifty, and it halved the power of a run.
    z = math.sqrt(3.3 * 0.4549)
    controls = [_comparison(1.0, 0.99, 1.01, stats.normal_two_sided_p(z))] * 18
    assert verdicts.calibration_factor(controls) < 2.0
    # The same excess shown by 400 controls is no accident and is believed nearly in full.
    assert verdicts.calibration_factor(controls * 22) > 3.0


def test_a_fixed_calibration_judges_one_benchmark_as_its_run_would() -> None:
    # Alone, one control cannot calibrate (5 are needed); an inflation of 23.8 given from
    # outside is taken as it is and turns p = 1e-4 into 0.42.
    pair = {"ab": _comparison(1.02, 1.01, 1.03, 1e-4), "aa": _comparison(1.0, 0.99, 1.01, 0.001)}
    assert verdicts.decide({"x": pair}, 0.01, 0.05)["x"]["verdict"] == "slower"
    alone = verdicts.decide({"x": pair}, 0.01, 0.05, inflation=23.8)["x"]
    assert alone["calibration"] == 23.8
    assert alone["ab"]["p_value"] == pytest.approx(0.42, abs=0.01)
    assert alone["verdict"] == "no-change-detected"


def test_aa_controls_that_look_null_leave_the_p_values_alone() -> None:
    controls = [0.9, 0.7, 0.5, 0.3, 0.6, 0.8, 0.4]
    run = {
        f"b{i}": {"ab": _comparison(1.05, 1.03, 1.07, 1e-6), "aa": _comparison(1.0, 0.98, 1.02, p)}
        for i, p in enumerate(controls)
    }
    decided = verdicts.decide(run, 0.01, 0.05)
    assert decided["b0"]["calibration"] == 1.0
    assert decided["b0"]["verdict"] == "slower"
    # Fewer than five controls are too few to estimate an inflation from.
    assert verdicts.calibration_factor([_comparison(1, 0.9, 1.1, 1e-9)] * 4) == 1.0


def test_a_benchmark_that_lost_its_power_to_load_says_so() -> None:
    noisy_control = _comparison(1.0, 0.9, 1.1, 0.9)
    judged = _decide(_comparison(1.0, 0.97, 1.03, 0.9), noisy_control, max_slowdown=0.05)
    assert judged["mde"] > 0.05
    assert any(r.startswith("lost power here") for r in judged["reasons"])
    quiet = _decide(_comparison(1.0, 0.97, 1.03, 0.9), _comparison(1.0, 0.995, 1.005, 0.9))
    assert not any("lost power" in r for r in quiet["reasons"])
