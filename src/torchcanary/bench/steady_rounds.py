"""A steady benchmark's turn in one round group: every side prepared, then interleaved rounds.

Each side warms up and calibrates (one side at a time while the inner loop is fixed on the
clock, and for a workload, which times its own cold compile; all at once after, since a
warm-up is never timed); then ``rounds`` rounds visit every side once, in a random order
that the next round reverses. Drift in the machine's speed is therefore shared by the sides
of a round, and going first or last favours no side.
"""

from __future__ import annotations

from functools import partial

from torchcanary.bench.samples import Batch, BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.side_worker import GroupWorkers, at_once, record_failure
from torchcanary.envs.worker_process import CallResult
from torchcanary.worker.bench.specs import WORKLOAD, spec_for_side
from torchcanary.worker.calls import BENCH_TIMING


def prepare_sides(
    crew: GroupWorkers,
    samples: BenchmarkSamples,
    settings: BenchSettings,
    recording: dict[str, str],
) -> dict[str, int]:
    """Warm up and calibrate the benchmark on every side; each ready side's slot.

    ``recording`` maps an environment to the folder where a user's workload records its
    outputs (for the numerics). The first preparation fixes the inner-loop count and the
    batch size for every side and group.
    """
    bench_id = samples.bench_id
    timeout_s = samples.spec.get("timeout_s")  # a workload's own, else the run's
    preparing = crew.shuffled()
    prepared: dict[str, CallResult] = {}

    def prepare(side: Side, spread: bool) -> None:
        kwargs = {
            "bench_id": bench_id,
            "spec": spec_for_side(samples.spec, side.name),
            "number": samples.number,
            "min_sample_s": settings.min_sample_ms / 1000,
            "warmup_max_s": settings.warmup_max_s,
            "spread": spread,
        }
        if side.role in recording and side == crew.first_of_role(side.role):
            kwargs["numerics_dir"] = recording[side.role]
        prepared[side.name] = crew.workers[side.name].call(
            f"{BENCH_TIMING}:prepare", kwargs, timeout_s
        )

    if samples.number is None or samples.spec["kind"] == WORKLOAD:
        # The first preparation calibrates the inner loop on the clock, and a workload's
        # times its own cold compile: one at a time.
        for side in preparing:
            prepare(side, spread=False)
    else:
        # Later ones only warm up, which is never timed: all sides at once, on every
        # CPU (pinned to the timed one they would queue for it while the others idle).
        at_once([partial(prepare, side, spread=True) for side in preparing])
    numbers: dict[str, int] = {}
    slots: dict[str, int] = {}
    for slot, side in enumerate(preparing):
        outcome = prepared[side.name]
        if not outcome.ok:
            record_failure(samples, side.name, outcome)
        elif "skipped" in outcome.value:
            samples.skipped[side.name] = outcome.value["skipped"]
        else:
            numbers[side.name] = outcome.value["number"]
            slots[side.name] = slot
            samples.warmups.setdefault(side.name, []).append(outcome.value["warmup"])
            if "facts" in outcome.value:
                samples.extras.setdefault(side.name, []).append(outcome.value["facts"])
    if samples.number is None and not samples.stopped:
        _fix_inner_loop(samples, numbers, settings)
    return slots


def _fix_inner_loop(
    samples: BenchmarkSamples, numbers: dict[str, int], settings: BenchSettings
) -> None:
    """One inner-loop count and batch size for every side and group, fixed once: the count
    from the slowest side's calibration, the batch so that slow benchmarks still get many
    short rounds (pairs, not samples, carry the statistics)."""
    samples.number = max(numbers.values())
    sample_s = samples.number * max(w[-1]["per_call_s"] for w in samples.warmups.values())
    samples.batch_size = max(
        1,
        min(
            settings.samples_per_round,
            int(settings.max_batch_ms / 1000 / max(sample_s, 1e-9)),
        ),
    )


def sample_rounds(crew: GroupWorkers, samples: BenchmarkSamples, settings: BenchSettings) -> bool:
    """The group's interleaved rounds of a prepared benchmark; False when a call broke
    (recorded as that side's failure)."""
    timeout_s = samples.spec.get("timeout_s")
    measured = 0.0
    order: list[Side] = []
    for round_index in range(settings.rounds):
        # Stop on time, never on what the samples say (that would bias the test), and
        # only after a reversed round, so order stays balanced.
        if round_index % 2 == 0 and measured >= settings.group_budget_s:
            break
        order = _round_order(crew, round_index, order)
        for slot, side in enumerate(order):
            outcome = crew.workers[side.name].call(
                f"{BENCH_TIMING}:sample",
                {
                    "bench_id": samples.bench_id,
                    "count": samples.batch_size,
                    "number": samples.number,
                },
                timeout_s,
            )
            if not outcome.ok:
                record_failure(samples, side.name, outcome)
                return False
            measured += outcome.duration_s
            samples.add(
                side.name,
                Batch(
                    crew.group,
                    round_index,
                    slot,
                    tuple(outcome.value["times_s"]),
                    tuple(outcome.value["cpu_s"]),
                ),
            )
    samples.measure_s += measured
    return True


def _round_order(crew: GroupWorkers, round_index: int, previous: list[Side]) -> list[Side]:
    """Random order in even rounds, its reverse in odd ones (A B, B A, ...).

    Going first or second in a round shifts a time by a few percent (the cache the
    previous process left behind); reversing exactly balances that shift between the
    sides instead of leaving it to chance.
    """
    if round_index % 2 and previous:
        return previous[::-1]
    return crew.shuffled()
