"""What the bench's figures promise, checked by simulating many runs of known truth.

Each simulated run is what ``torchcanary bench`` measures: every benchmark has a baseline
(A), a second baseline worker set (A2, the A/A control) and a candidate (B), in separate
worker processes per group, each process a little luckier or unluckier for its whole life.
"""

from __future__ import annotations

import math
import random

import pytest

from torchcanary.bench import compare, verdicts
from torchcanary.bench.samples import Batch, BenchmarkSamples

SIDES = ("A", "A2", "B")


def _benchmark(
    rng: random.Random, shift: float, groups: int, rounds: int, process_luck: float, noise: float
) -> BenchmarkSamples:
    samples = BenchmarkSamples("sim", {"kind": "startup", "device": "cpu"})
    for group in range(groups):
        luck = {side: rng.gauss(0, process_luck) for side in SIDES}
        for round_index in range(rounds):
            for slot, side in enumerate(rng.sample(SIDES, 3)):
                shifted = shift if side == "B" else 0.0
                seconds = math.exp(shifted + luck[side] + rng.gauss(0, noise))
                samples.add(side, Batch(group, round_index, slot, (seconds,)))
    return samples


def _run(
    rng: random.Random,
    shifts: list[float],
    groups: int,
    rounds: int,
    luck: float,
    noise: float,
    both_baselines: bool = True,
) -> dict[str, dict]:
    comparisons = {}
    for index, shift in enumerate(shifts):
        samples = _benchmark(rng, shift, groups, rounds, luck, noise)
        if both_baselines:  # what the bench does
            comparisons[f"b{index}"] = compare.compare_pair(samples, "A", "B", "A2", 0.99)
        else:
            comparisons[f"b{index}"] = {
                "ab": compare.compare_sides(samples, "A", "B", 0.99),
                "aa": compare.compare_sides(samples, "A", "A2", 0.99),
            }
    return verdicts.decide(comparisons, 0.01, 0.05)


@pytest.mark.parametrize(
    ("rounds", "noise_per_luck"),
    [(1, 1 / 3), (8, 1.0)],
    ids=["one-shot 12 groups x 1", "steady 12 groups x 8 rounds"],
)
def test_where_the_mde_says_a_change_is_detectable_it_is_found_nine_times_in_ten(
    rounds: int, noise_per_luck: float
) -> None:
    # One real 5% slowdown among six benchmarks, in runs whose process-to-process noise
    # ranges from 0.5% to 4%, so the MDE lands on both sides of 5%. Where it said "5% or
    # less", the slowdown must be called slower about 90% of the time (it was 55%).
    rng = random.Random(2026)
    truth = math.log(1.05)
    promised = found = 0
    for _ in range(300):
        luck = math.exp(rng.uniform(math.log(0.005), math.log(0.04)))
        decided = _run(rng, [truth, 0, 0, 0, 0, 0], 12, rounds, luck, luck * noise_per_luck)
        mde = decided["b0"]["mde"]
        if mde is not None and mde <= 0.05:
            promised += 1
            found += decided["b0"]["verdict"] == "slower"
    assert promised >= 80
    assert found / promised >= 0.9


def test_one_shot_judged_against_both_baseline_sets_finds_more_and_alarms_no_more() -> None:
    # 12 groups x 1 sample, one real 20% slowdown among 18 (the default run's family), at
    # process noise like a fresh interpreter's (10%). The same simulated runs are judged
    # both ways: against the baseline's first worker set only, and against both.
    found = {True: 0, False: 0}
    alarms = {True: 0, False: 0}
    runs = 100
    for both in (True, False):
        rng = random.Random(18)
        for _ in range(runs):
            decided = _run(rng, [math.log(1.2)] + [0.0] * 17, 12, 1, 0.1, 0.02, both)
            found[both] += decided["b0"]["verdict"] == "slower"
            alarms[both] += sum(
                decided[f"b{i}"]["verdict"] in ("slower", "faster") for i in range(1, 18)
            )
    assert found[True] >= 1.2 * found[False]
    assert alarms[True] <= 0.01 * runs * 17
    pooled = _benchmark(random.Random(1), 0.0, 12, 1, 0.1, 0.02)
    method = compare.compare_pair(pooled, "A", "B", "A2", 0.99)["ab"]["method"]
    assert "against both baseline worker sets" in method
