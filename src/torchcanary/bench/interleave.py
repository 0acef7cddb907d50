"""Schedules the measurements: fresh workers per round group, sides interleaved per round.

For each of ``groups`` round groups every side gets a fresh worker process
(:mod:`.side_worker`; so process-level luck, such as memory layout or which core the
scheduler favoured, varies between groups and hits both sides alike); then one-shot
benchmarks (import time, cold compile) take their fresh interpreters first, right after the
workers imported torch from the same files, the steady benchmarks follow one by one in a
random order, each prepared on every side and sampled in interleaved rounds
(:mod:`.steady_rounds`), and the collectives end the group (:mod:`.fresh_processes`).

A benchmark that skips, errors, crashes or hangs on any side stops there for the rest of the
run; its worker is replaced and the other benchmarks go on. Between groups the section may
look at the evidence (``on_look``) and settle benchmarks whose verdict cannot change
(:mod:`.sequential`); settled ones are not measured again, and the schedule ends once
nothing is left to measure or the next group would overrun ``budget_s``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from torchcanary.bench.fresh_processes import measure_collectives, measure_oneshots
from torchcanary.bench.kept_facts import KeptFacts
from torchcanary.bench.samples import Batch, BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.side_worker import GroupWorkers, SideWorker, at_once
from torchcanary.bench.steady_rounds import prepare_sides, sample_rounds
from torchcanary.bench.workload_checks import numerics_dir
from torchcanary.context import RunContext
from torchcanary.envs.worker_process import CallResult
from torchcanary.worker.bench.roofline import ROOFLINE_KINDS, probe_request
from torchcanary.worker.bench.specs import (
    DERIVED_KINDS,
    ONESHOT_KINDS,
    RANKED_KINDS,
    WORKLOAD,
    WORKLOAD_COLD,
    spec_for_side,
)
from torchcanary.worker.calls import BENCH_DISPATCH, BENCH_ROOFLINE


@dataclass
class Measurements:
    """What a whole schedule produced."""

    benchmarks: dict[str, BenchmarkSamples] = field(default_factory=dict)
    roofline: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> probe
    workers: list[dict[str, Any]] = field(default_factory=list)  # configs, per start
    device: str = "cpu"
    device_note: str = ""
    wall_s: float = 0.0
    groups_run: int = 0
    ended_by: str = "groups"  # or "settled" (nothing left to measure) or "budget"


PlanBenchmarks = Callable[[str], list[dict[str, Any]]]


def resolve_device(requested: str, devices_by_role: dict[str, list[str]]) -> tuple[str, str]:
    """The device every side can use, and a note when ``auto`` had to settle for less."""
    if requested != "auto":
        return requested, ""
    if all("cuda" in found for found in devices_by_role.values()):
        return "cuda", ""
    if any("cuda" in found for found in devices_by_role.values()):
        with_gpu = sorted(r for r, found in devices_by_role.items() if "cuda" in found)
        return "cpu", (
            f"only {', '.join(with_gpu)} sees a CUDA GPU, so both run on cpu; "
            'set device = "cuda" to see the other side skip'
        )
    return "cpu", ""


def still_measuring(benchmarks: dict[str, BenchmarkSamples], cold_of: dict[str, str]) -> bool:
    """Whether another group would measure anything.

    A compiled workload's cold compile is sampled only while its step is prepared, so once
    the step has settled or stopped the cold one can gain nothing more by waiting.
    """
    step_of = {cold: step for step, cold in cold_of.items()}
    return any(
        samples.measuring and (bench_id not in step_of or benchmarks[step_of[bench_id]].measuring)
        for bench_id, samples in benchmarks.items()
    )


class Interleaver:
    def __init__(
        self,
        ctx: RunContext,
        settings: BenchSettings,
        sides: list[Side],
        rng: random.Random,
        progress: Callable[[str], None] = lambda _: None,
        on_stopped: Callable[[BenchmarkSamples], None] = lambda _: None,
        on_look: Callable[[int], None] = lambda _: None,
        looks: tuple[int, ...] = (),
        on_group: Callable[[int, float], None] = lambda _groups, _seconds: None,
        profiles: KeptFacts | None = None,
        rooflines: KeptFacts | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.sides = sides
        self.rng = rng
        self.progress = progress
        self.on_stopped = on_stopped  # told at once of a benchmark that skipped or failed
        self.on_look = on_look  # called after the group counts in ``looks``; may settle some
        self.looks = looks
        self.on_group = on_group  # told the groups done and the last one's seconds
        self.profiles = profiles  # dispatch profiles kept from earlier runs, if any
        self.rooflines = rooflines  # and rooflines
        self.result = Measurements()
        self._reported: set[str] = set()
        self._cold_of: dict[str, str] = {}  # a compiled workload's step id -> its cold id

    # workers ----------------------------------------------------------------------------
    def _start_group(self, group: int) -> GroupWorkers:
        # Started in a random order: which process is spawned first must not be a property
        # of one side (the first of several concurrent starts can land on fresher memory).
        order = self.rng.sample(self.sides, len(self.sides))
        workers = {side.name: SideWorker(self.ctx, side, self.settings) for side in order}
        outcomes: dict[str, CallResult] = {}

        def start(name: str) -> None:
            outcomes[name] = workers[name].start()

        at_once([partial(start, name) for name in workers])
        for name, outcome in outcomes.items():
            self.result.workers.append(
                {
                    "group": group,
                    "side": name,
                    "status": outcome.status,
                    "error": outcome.error,
                    **(outcome.value or {}),
                }
            )
        return GroupWorkers(group, workers, self.sides, self.rng)

    # the schedule -----------------------------------------------------------------------
    def run(self, plan: PlanBenchmarks) -> Measurements:
        """Measure every benchmark ``plan(device)`` returns, over the round groups."""
        started = time.monotonic()
        specs: list[dict[str, Any]] = []
        for group in range(self.settings.groups):
            group_started = time.monotonic()
            crew = self._start_group(group)
            try:
                if group == 0:
                    specs = self._plan(crew.workers, plan)
                self._group(crew, specs)
            finally:
                for worker in crew.workers.values():
                    worker.end()
            self.result.groups_run = group + 1
            self.on_group(group + 1, time.monotonic() - group_started)
            for samples in self.result.benchmarks.values():
                if samples.stopped and samples.bench_id not in self._reported:
                    self._reported.add(samples.bench_id)
                    self.on_stopped(samples)
            if group + 1 in self.looks:
                self.on_look(group + 1)
            if not still_measuring(self.result.benchmarks, self._cold_of):
                self.result.ended_by = "settled"
                break
            last_group_s = time.monotonic() - group_started
            budget = self.settings.budget_s
            if budget and time.monotonic() - started + last_group_s > budget:
                if group + 1 < self.settings.groups:
                    self.result.ended_by = "budget"
                break
        self.result.wall_s = time.monotonic() - started
        return self.result

    def _plan(self, workers: dict[str, SideWorker], plan: PlanBenchmarks) -> list[dict[str, Any]]:
        """The device every side can use (from the first group's workers) and the
        benchmarks to measure on it."""
        devices = {
            w.side.role: list((w.configured or {}).get("devices", ["cpu"]))
            for w in workers.values()
        }
        device, note = resolve_device(self.settings.device, devices)
        self.result.device, self.result.device_note = device, note
        specs = plan(device)
        for spec in specs:
            self.result.benchmarks[spec["id"]] = BenchmarkSamples(spec["id"], spec)
            if spec["kind"] == WORKLOAD_COLD:
                self._cold_of[spec["step"]] = spec["id"]
        return specs

    def _roofline(self, crew: GroupWorkers, specs: list[dict[str, Any]]) -> None:
        """Each environment's measured peaks, once (or kept from an earlier run of the same
        fixed environment), for the roofline of its benchmarks."""
        if not any(s["kind"] in ROOFLINE_KINDS for s in specs):
            return
        request = probe_request(specs, self.result.device)
        kept_as = {**request, "threads": self.settings.threads, "cpus": list(self.settings.cpus)}
        for worker in crew.one_per_role():
            role = worker.side.role
            kept = self.rooflines.load(role, kept_as) if self.rooflines else None
            if kept is not None:
                self.result.roofline[role] = kept
                continue
            probe = worker.call(BENCH_ROOFLINE, request)
            self.result.roofline[role] = (
                probe.value if probe.ok else {"error": f"{probe.status}: {probe.error}"}
            )
            if probe.ok and self.rooflines:
                self.rooflines.keep(role, kept_as, probe.value)

    def _group(self, crew: GroupWorkers, specs: list[dict[str, Any]]) -> None:
        group = crew.group
        # Fresh interpreters first, seconds after the group's workers imported torch from
        # the same files: every sample then finds them equally warm in the page cache.
        # Taken after the steady benchmarks, they came 5 to 25 s later (longer in the first
        # groups, while every benchmark still measured), long enough for the host to
        # reclaim the candidate's CUDA libraries on some groups only: its import took 2.4 s
        # in the first four groups of a quiet run and 1.25 s after, which no interval
        # across groups survives.
        oneshot = [
            s
            for s in specs
            if s["kind"] in ONESHOT_KINDS and self.result.benchmarks[s["id"]].measuring
        ]
        if oneshot and self.settings.oneshot_samples:
            self.progress(f"group {group + 1}/{self.settings.groups}: startup and compile")
            measure_oneshots(crew, self.result.benchmarks, self.settings, oneshot)
        if group == 0:
            self._roofline(crew, specs)
        steady = [s for s in specs if s["kind"] not in ONESHOT_KINDS + RANKED_KINDS + DERIVED_KINDS]
        for spec in self.rng.sample(steady, len(steady)):
            samples = self.result.benchmarks[spec["id"]]
            if samples.measuring:
                self.progress(f"group {group + 1}/{self.settings.groups}: {spec['id']}")
                self._steady(crew, samples)
        ranked = [
            s
            for s in specs
            if s["kind"] in RANKED_KINDS and self.result.benchmarks[s["id"]].measuring
        ]
        if ranked:
            self.progress(f"group {group + 1}/{self.settings.groups}: collectives")
            measure_collectives(crew, self.result.benchmarks, self.settings, ranked)

    def _derived(self, group: int, samples: BenchmarkSamples, slots: dict[str, int]) -> None:
        """A compiled workload's cold compile: one sample per side from its preparation."""
        cold_id = self._cold_of.get(samples.bench_id)
        if cold_id is None:
            return
        cold = self.result.benchmarks[cold_id]
        cold.skipped.update(samples.skipped)
        cold.failed.update(samples.failed)
        if cold.stopped:
            return
        for side, facts in samples.extras.items():
            if side in slots and facts and "cold_compile_s" in facts[-1]:
                seconds = float(facts[-1]["cold_compile_s"])
                cold.add(side, Batch(group, 0, slots[side], (seconds,)))
                cold.extras.setdefault(side, []).append(facts[-1])
        cold.number = 1

    def _steady(self, crew: GroupWorkers, samples: BenchmarkSamples) -> None:
        # A user's workload records its outputs once per environment, for the numerics.
        recording = (
            {
                side.role: str(numerics_dir(self.ctx.work_dir, samples.bench_id, side.role))
                for side in self.sides
            }
            if samples.spec["kind"] == WORKLOAD and crew.group == 0
            else {}
        )
        slots = prepare_sides(crew, samples, self.settings, recording)
        self._derived(crew.group, samples, slots)
        if not samples.stopped:
            if not sample_rounds(crew, samples, self.settings):
                self._derived(crew.group, samples, {})
            elif crew.group == 0 and samples.spec["kind"] != "synthetic":  # what ran is known
                for worker in crew.one_per_role():
                    samples.dispatch[worker.side.role] = self._dispatch(worker, samples)
        crew.release(samples.bench_id)

    def _dispatch(self, worker: SideWorker, samples: BenchmarkSamples) -> dict[str, Any]:
        """What the benchmark ran in the worker's environment: kept from an earlier run
        where it may be, else profiled now (and kept)."""
        spec = spec_for_side(samples.spec, worker.side.name)
        kept = self.profiles.load(worker.side.role, spec) if self.profiles else None
        if kept is not None:
            return kept
        profiled = worker.call(BENCH_DISPATCH, {"bench_id": samples.bench_id})
        if not profiled.ok:
            return {"error": f"{profiled.status}: {profiled.error}"[:500]}
        if self.profiles:
            self.profiles.keep(worker.side.role, spec, profiled.value)
        return dict(profiled.value)
