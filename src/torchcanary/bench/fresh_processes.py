"""The benchmarks whose samples need processes of their own, measured in one round group.

One-shot benchmarks (import time, cold compile) take one fresh interpreter per sample,
started from the side's worker; collectives take one fresh set of ranks per group and side
(on CPU forked from that side's worker, spread over every CPU).
"""

from __future__ import annotations

from typing import Any

from torchcanary.bench.samples import Batch, BenchmarkSamples
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.side_worker import GroupWorkers, refused
from torchcanary.worker.bench.specs import STARTUP
from torchcanary.worker.calls import BENCH_COLLECTIVES, BENCH_ONESHOT


def measure_collectives(
    crew: GroupWorkers,
    benchmarks: dict[str, BenchmarkSamples],
    settings: BenchSettings,
    specs: list[dict[str, Any]],
) -> None:
    """One fresh set of ranks per side, group and (world size, backend)."""
    by_world: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for spec in specs:
        if not benchmarks[spec["id"]].stopped:
            by_world.setdefault((spec["world_size"], spec["backend"]), []).append(spec)
    for (world, backend), entries in by_world.items():
        for slot, side in enumerate(crew.shuffled()):
            outcome = crew.workers[side.name].call(
                BENCH_COLLECTIVES,
                {
                    "entries": entries,
                    "world_size": world,
                    "backend": backend,
                    "rounds": settings.rounds,
                    "samples": settings.samples_per_round,
                    "min_sample_s": settings.min_sample_ms / 1000,
                    "budget_s": settings.group_budget_s / len(crew.sides),
                    "timeout_s": settings.timeout_s * 0.9,
                },
                settings.timeout_s,
            )
            for spec in entries:
                samples = benchmarks[spec["id"]]
                answer = outcome.value[spec["id"]] if outcome.ok else {}
                if refused(samples, side.name, outcome, answer):
                    continue
                for round_index, times in enumerate(answer["batches"]):
                    samples.add(side.name, Batch(crew.group, round_index, slot, tuple(times)))
                samples.measure_s += answer["measure_s"]
                samples.number = answer["number"]


def measure_oneshots(
    crew: GroupWorkers,
    benchmarks: dict[str, BenchmarkSamples],
    settings: BenchSettings,
    specs: list[dict[str, Any]],
) -> None:
    """Each sample is a fresh interpreter started from the side's worker."""
    jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec in specs:
        if not benchmarks[spec["id"]].stopped:
            key = ("startup", "") if spec["kind"] == STARTUP else ("compile", spec["model"])
            jobs.setdefault(key, []).append(spec)
    for (kind, model), entries in jobs.items():
        func = BENCH_ONESHOT[kind]
        kwargs: dict[str, Any] = {
            "device": entries[0]["device"],
            "threads": settings.threads,
            "timeout_s": settings.timeout_s * 0.9,
        }
        if kind == STARTUP:
            kwargs["measures"] = [s["measure"] for s in entries]
        else:
            kwargs.update(
                model=model,
                backend=entries[0]["backend"],
                min_sample_s=settings.min_sample_ms / 1000,
            )
        for index in range(settings.oneshot_samples):
            round_index = crew.group * settings.oneshot_samples + index
            for slot, side in enumerate(crew.shuffled()):
                outcome = crew.workers[side.name].call(func, kwargs, settings.timeout_s)
                for spec in entries:
                    samples = benchmarks[spec["id"]]
                    if samples.stopped:
                        continue
                    value = outcome.value if outcome.ok else {}
                    if refused(samples, side.name, outcome, value):
                        continue
                    key = spec["measure"] if kind == STARTUP else spec["phase"]
                    samples.add(
                        side.name,
                        Batch(crew.group, round_index, slot, (float(value["seconds"][key]),)),
                    )
                    samples.extras.setdefault(side.name, []).append(
                        {k: v for k, v in value.items() if k != "seconds"}
                    )
                    samples.measure_s += outcome.duration_s / len(entries)
