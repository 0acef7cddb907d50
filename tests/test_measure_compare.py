"""From structured samples to verdicts: ratio, interval, test choice, BH, A/A control."""

from __future__ import annotations

import math
import random

import pytest

from torchcanary.measure import compare
from torchcanary.measure.samples import Batch, BenchmarkSamples


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
    assert result["p_value"] == 1.0 and result["ci_low"] > 1.2
    assert "one worker group" in result["method"]


def test_too_few_pairs_is_not_testable_and_few_pairs_use_the_t_test() -> None:
    assert not compare.compare_sides(
        _samples({"A": 0, "B": 0}, groups=1, rounds=2), "A", "B", 0.99
    )["testable"]
    few = compare.compare_sides(_samples({"A": 0, "B": 0.1}, groups=2, rounds=3), "A", "B", 0.99)
    assert few["method"].startswith("paired t-test on 6")


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
    return compare.decide({"x": pair}, 0.01, 0.05, **kwargs)["x"]


def _comparison(ratio: float, low: float, high: float, p: float) -> dict:
    return {
        "testable": True,
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "log_ratio": math.log(ratio),
        "se_log": (math.log(high) - math.log(low)) / 5.15,
    }


def test_verdicts_follow_significance_and_the_equivalence_band() -> None:
    assert _decide(_comparison(1.08, 1.05, 1.11, 1e-5))["verdict"] == "slower"
    assert _decide(_comparison(0.9, 0.88, 0.92, 1e-5))["verdict"] == "faster"
    assert _decide(_comparison(1.01, 0.98, 1.03, 0.4))["verdict"] == "same"
    assert _decide(_comparison(1.01, 0.8, 1.3, 0.4))["verdict"] == "too-noisy"


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
    # (z_0.995 + z_0.9) * se: se = ln(1.01/0.99)/5.15 gives an MDE near 1.5%.
    assert quiet["mde"] == pytest.approx(
        math.exp(3.857 * math.log(1.01 / 0.99) / 5.15) - 1, rel=0.01
    )


def test_bh_spreads_the_false_discovery_budget_over_the_run() -> None:
    # Raw p = 0.008 passes 0.01 alone, but among six comparisons BH gives q = 0.008*6/2.
    run = {f"null{i}": {"ab": _comparison(1.0, 0.9, 1.1, 0.5)} for i in range(4)}
    run["borderline"] = {"ab": _comparison(1.1, 1.01, 1.2, 0.008)}
    run["clear"] = {"ab": _comparison(1.5, 1.4, 1.6, 1e-9)}
    decided = compare.decide(run, 0.01, 0.05)
    assert decided["clear"]["verdict"] == "slower"
    assert decided["borderline"]["q_ab"] == pytest.approx(0.024)
    assert decided["borderline"]["verdict"] == "too-noisy"


def test_overdispersed_aa_controls_calibrate_the_ab_p_values_down() -> None:
    # Ten A/A controls all at p = 0.001 (z = 3.29): inflation 3.29**2 / 0.455 = 23.8, so an
    # A/B p-value of 1e-4 (z = 3.89) becomes z = 0.80, p = 0.42, and its interval widens.
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
    decided = compare.decide(run, 0.01, 0.05)
    assert decided["x"]["calibration"] == pytest.approx(23.8, rel=0.01)
    assert decided["x"]["ab"]["p_value"] == pytest.approx(0.42, abs=0.01)
    assert decided["x"]["ab"]["uncalibrated_p_value"] == 1e-4
    assert decided["x"]["ab"]["ci_high"] > 1.05
    assert decided["x"]["verdict"] == "too-noisy"


def test_a_fixed_calibration_judges_one_benchmark_as_its_run_would() -> None:
    # Alone, one control cannot calibrate (5 are needed); the run's inflation of 23.8 given
    # from outside turns p = 1e-4 into 0.42 exactly as in the run above.
    pair = {"ab": _comparison(1.02, 1.01, 1.03, 1e-4), "aa": _comparison(1.0, 0.99, 1.01, 0.001)}
    assert compare.decide({"x": pair}, 0.01, 0.05)["x"]["verdict"] == "slower"
    alone = compare.decide({"x": pair}, 0.01, 0.05, inflation=23.8)["x"]
    assert alone["calibration"] == 23.8
    assert alone["ab"]["p_value"] == pytest.approx(0.42, abs=0.01)
    assert alone["verdict"] == "too-noisy"


def test_aa_controls_that_look_null_leave_the_p_values_alone() -> None:
    controls = [0.9, 0.7, 0.5, 0.3, 0.6, 0.8, 0.4]
    run = {
        f"b{i}": {"ab": _comparison(1.05, 1.03, 1.07, 1e-6), "aa": _comparison(1.0, 0.98, 1.02, p)}
        for i, p in enumerate(controls)
    }
    decided = compare.decide(run, 0.01, 0.05)
    assert decided["b0"]["calibration"] == 1.0
    assert decided["b0"]["verdict"] == "slower"
    # Fewer than five controls are too few to estimate an inflation from.
    assert compare.calibration_factor([_comparison(1, 0.9, 1.1, 1e-9)] * 4) == 1.0
