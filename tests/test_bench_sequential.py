"""Sequential verdicts keep the run's promises: simulated runs of known truth, looked at
between worker groups exactly as the bench does, against the same runs judged only at the end.
"""

from __future__ import annotations

import math
import random
from typing import Any

from torchcanary import stats
from torchcanary.bench import compare, sequential, verdicts
from torchcanary.bench.result import BenchVerdict
from torchcanary.bench.samples import Batch, BenchmarkSamples

SIDES = ("A", "A2", "B")
GROUPS, ROUNDS, FDR, BAND = 12, 6, 0.05, 0.05
RULE = sequential.StopRule(GROUPS, min_effect=0.01)  # verdicts.decide's default floor


def _benchmark(rng: random.Random, shift: float, luck: float, noise: float) -> BenchmarkSamples:
    samples = BenchmarkSamples("sim", {"kind": "linear", "device": "cpu"})
    for group in range(GROUPS):
        process = {side: rng.gauss(0, luck) for side in SIDES}
        for round_index in range(ROUNDS):
            for slot, side in enumerate(rng.sample(SIDES, 3)):
                seconds = math.exp(
                    (shift if side == "B" else 0.0) + process[side] + rng.gauss(0, noise)
                )
                samples.add(side, Batch(group, round_index, slot, (seconds,)))
    return samples


def _compare(samples: BenchmarkSamples) -> dict[str, Any]:
    return {
        "ab": compare.compare_sides(samples, "A", "B", 1 - FDR),
        "aa": compare.compare_sides(samples, "A", "A2", 1 - FDR),
    }


def _decide(comparisons: dict[str, Any], fdr: float) -> dict[str, Any]:
    return verdicts.decide(comparisons, fdr, BAND)


def _sequential(benchmarks: dict[str, BenchmarkSamples]) -> tuple[dict[str, Any], dict[str, int]]:
    """The bench's schedule replayed: look, stop the settled, measure on, judge at the end."""
    looks = sequential.look_points(GROUPS)
    stops: dict[str, sequential.Stop] = {}

    def measured(bench_id: str, groups: int) -> BenchmarkSamples:
        stop = stops.get(bench_id)
        return benchmarks[bench_id].first_groups(min(groups, stop.groups if stop else groups))

    for groups in looks:
        now = {b: measured(b, groups) for b in benchmarks}
        stops |= sequential.look(now, groups, stops, _compare, _decide, FDR, BAND, RULE)
    final = {b: measured(b, GROUPS) for b in benchmarks}
    decided, _ = sequential.judge(final, stops, _compare, _decide, FDR, len(looks))
    used = {b: stops[b].groups if b in stops else GROUPS for b in benchmarks}
    return decided, used


def _runs(
    seed: int, count: int, shifts: list[float], luck_range: tuple[float, float] = (0.005, 0.03)
) -> list[tuple[dict, dict, dict]]:
    rng = random.Random(seed)
    runs = []
    for _ in range(count):
        luck = math.exp(rng.uniform(*map(math.log, luck_range)))
        benchmarks = {f"b{i}": _benchmark(rng, s, luck, luck) for i, s in enumerate(shifts)}
        at_end = verdicts.decide({b: _compare(s) for b, s in benchmarks.items()}, FDR, BAND)
        decided, used = _sequential(benchmarks)
        runs.append((decided, used, at_end))
    return runs


def test_looking_early_raises_no_false_alarms_and_saves_most_of_the_groups() -> None:
    runs = _runs(7, 40, [0.0] * 8)

    def alarmed(verdicts: dict[str, Any]) -> int:
        return sum(r["verdict"] in ("slower", "faster") for r in verdicts.values())

    # All nulls: BH at FDR 0.05 lets at most 5% of the 40 runs alarm (2 expected, 4 is the
    # binomial's 95th percentile), and looking early adds none to judging at the end.
    assert sum(alarmed(d) > 0 for d, _, _ in runs) <= 4
    assert sum(alarmed(d) for d, _, _ in runs) <= sum(alarmed(e) for _, _, e in runs)
    used = [g for _, groups, _ in runs for g in groups.values()]
    assert sum(used) / len(used) <= 0.6 * GROUPS, "settled nulls should stop about half-way"


def test_a_real_slowdown_is_found_as_often_as_when_judged_only_at_the_end() -> None:
    runs = _runs(11, 40, [math.log(1.04)] + [0.0] * 5)
    sequential_found = sum(d["b0"]["verdict"] == "slower" for d, _, _ in runs)
    end_found = sum(e["b0"]["verdict"] == "slower" for _, _, e in runs)
    assert sequential_found >= end_found - 2
    assert all(d["b0"].get("stopped") is None or d["b0"]["verdict"] == "slower" for d, _, _ in runs)


def test_a_slowdown_inside_the_band_is_not_settled_as_same_on_its_way_to_significance() -> None:
    # 3% is inside the ±5% band: stopping as soon as "same" were shown would settle many
    # such slowdowns before they reach significance. The estimate floor keeps them going.
    runs = _runs(23, 40, [math.log(1.03)] + [0.0] * 5, luck_range=(0.005, 0.015))
    settled_same = sum((d["b0"].get("stopped") or {}).get("verdict") == "same" for d, _, _ in runs)
    assert settled_same <= 3  # about 1 in 20 reaches the floor by luck at four groups
    sequential_found = sum(d["b0"]["verdict"] == "slower" for d, _, _ in runs)
    end_found = sum(e["b0"]["verdict"] == "slower" for _, _, e in runs)
    assert sequential_found >= end_found - 2


def test_an_undecidable_benchmark_stops_early_and_says_why() -> None:
    # 25% process luck: twelve groups could neither show "same" within ±5% nor find 5%.
    runs = _runs(5, 10, [0.0, 0.0, 0.0], luck_range=(0.25, 0.25))
    stopped = [d["b0"].get("stopped") for d, _, _ in runs]
    undecidable = [s for s in stopped if s and "undecidable" in s["reason"]]
    assert len(undecidable) >= 8, stopped  # no change to find: low conditional power
    # Before FUTILITY_FROM groups only a far-out spread is trusted: twice the band.
    early = [s for s in undecidable if s["groups"] < sequential.FUTILITY_FROM]
    assert early and all("2x the ±5%" in s["reason"] for s in early), undecidable
    assert all(d["b0"]["verdict"] == "no-change-detected" for d, _, _ in runs)


def _projected(bands: float, groups: int) -> dict[str, Any]:
    """A benchmark with no change seen whose last group would leave its interval ``bands``
    times the band wide, as ``verdicts.decide`` hands it to a look after ``groups``."""
    quantile = stats.t_quantile(1 - FDR / 2, GROUPS - 1) * math.sqrt(groups / GROUPS)
    se_log = math.log1p(bands * BAND) / quantile
    ab = {"testable": True, "log_ratio": 0.0, "se_log": se_log, "ratio": 1.0, "p_value": 1.0}
    return {"ab": ab, "verdict": BenchVerdict.NO_CHANGE_DETECTED}


def test_a_rough_spread_gives_a_benchmark_up_early_only_when_it_is_far_out() -> None:
    # Four groups give three degrees of freedom: a spread projected 1.5 bands wide may be
    # luck, so it is measured on to FUTILITY_FROM; one projected 3 bands wide is out of reach.
    first = sequential.FIRST_LOOK
    assert first < sequential.FUTILITY_FROM
    decided = {"near": _projected(1.5, first), "far": _projected(3.0, first)}
    assert list(sequential.interim_stops(decided, first, FDR, BAND, RULE)) == ["far"]
    later = {"near": _projected(1.5, sequential.FUTILITY_FROM)}
    assert list(sequential.interim_stops(later, sequential.FUTILITY_FROM, FDR, BAND, RULE)) == [
        "near"
    ]


def test_a_noisy_benchmark_with_a_clear_change_is_not_given_up_on() -> None:
    # As noisy, but twice as slow: the evidence hints at a change, so it keeps measuring.
    runs = _runs(9, 10, [math.log(2.0), 0.0, 0.0], luck_range=(0.25, 0.25))
    assert not any(
        "undecidable" in (d["b0"].get("stopped") or {}).get("reason", "") for d, _, _ in runs
    )


def test_giving_up_on_noisy_benchmarks_costs_almost_none_of_the_changes_they_would_find():
    # As noisy, and 40% slower: found at the end most of the time, and a look that gives up
    # must not lose those (conditional power under the trend seen, not "no sign at all").
    runs = _runs(13, 40, [math.log(1.4), 0.0, 0.0], luck_range=(0.25, 0.25))
    sequential_found = sum(d["b0"]["verdict"] == "slower" for d, _, _ in runs)
    end_found = sum(e["b0"]["verdict"] == "slower" for _, _, e in runs)
    assert end_found >= 20, end_found  # the case means something: the end finds it
    assert sequential_found >= end_found - 2, (sequential_found, end_found)


def test_same_shows_the_interval_it_was_decided_on() -> None:
    ((decided, _, _),) = _runs(3, 1, [0.0, 0.0, 0.0], luck_range=(0.005, 0.005))
    same = [r for r in decided.values() if r["verdict"] == "same"]
    assert same
    for result in same:
        low, high = result["equivalence_interval"]
        assert (result["ab"]["ci_low"], result["ab"]["ci_high"]) == (low, high)
        assert low >= 1 / (1 + BAND) and high <= 1 + BAND


def test_a_large_change_stops_early_and_says_when_and_why() -> None:
    ((decided, used, _),) = _runs(3, 1, [math.log(1.5), 0.0, 0.0])
    assert decided["b0"]["verdict"] == "slower"
    assert used["b0"] == sequential.FIRST_LOOK
    assert decided["b0"]["stopped"]["groups"] == sequential.FIRST_LOOK
    assert "early bar" in decided["b0"]["reasons"][0]


def test_the_final_family_keeps_what_the_interim_looks_did_not_spend() -> None:
    assert sequential.look_points(12) == (4, 6, 8, 10)
    assert sequential.final_fdr(0.05, 4) == 0.05 * 0.96
    assert sequential.look_points(4) == ()


def test_a_cold_compile_stops_waiting_once_its_step_is_settled() -> None:
    from torchcanary.bench.interleave import still_measuring

    step = BenchmarkSamples("workload/step", {"kind": "workload"})
    cold = BenchmarkSamples("workload/step/cold", {"kind": "workload_cold"})
    other = BenchmarkSamples("linear/x", {"kind": "linear"})
    benchmarks = {s.bench_id: s for s in (step, cold, other)}
    cold_of = {step.bench_id: cold.bench_id}
    assert still_measuring(benchmarks, cold_of)
    other.settled_at = 4
    assert still_measuring(benchmarks, cold_of)  # the step (and so its cold) goes on
    step.settled_at = 6
    # Nothing but the cold compile is unsettled, and it is sampled only with its step.
    assert cold.measuring and not still_measuring(benchmarks, cold_of)
