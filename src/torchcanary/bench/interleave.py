"""Schedules the measurements: fresh workers per round group, sides interleaved per round.

For each of ``groups`` round groups every side gets a fresh worker process (so process-level
luck, such as memory layout or which core the scheduler favoured, varies between groups and
hits both sides alike); then, benchmark by benchmark, each side warms up and calibrates (one
side at a time in the first group, which fixes the inner loop on the clock; all at once
after, since a warm-up is never timed), and
``rounds`` rounds visit every side once, in a random order that the next round reverses.
Drift in the machine's speed is therefore shared by the sides of a round, and going first
or last favours no side. One-shot benchmarks (import
time, cold compile) take one fresh interpreter per sample, first in each group (right after
its workers imported torch from the same files); collectives take one fresh set of
ranks per group and side (on CPU forked from that side's worker, spread over every CPU).

A benchmark that skips, errors, crashes or hangs on any side stops there for the rest of the
run; its worker is replaced and the other benchmarks go on. Between groups the section may
look at the evidence (``on_look``) and settle benchmarks whose verdict cannot change
(:mod:`.sequential`); settled ones are not measured again, and the schedule ends once
nothing is left to measure or the next group would overrun ``budget_s``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from torchcanary.bench.kept_facts import KeptFacts
from torchcanary.bench.samples import Batch, BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.workload_checks import numerics_dir
from torchcanary.context import RunContext
from torchcanary.envs.worker_process import CallResult, WorkerProcess
from torchcanary.worker.bench.roofline import ROOFLINE_KINDS, probe_request
from torchcanary.worker.bench.specs import DERIVED_KINDS, ONESHOT_KINDS, RANKED_KINDS, spec_for_side
from torchcanary.worker.calls import (
    BENCH_COLLECTIVES,
    BENCH_DISPATCH,
    BENCH_ONESHOT,
    BENCH_ROOFLINE,
    BENCH_TIMING,
)

_TIMING = BENCH_TIMING
_START_TIMEOUT_S = 180.0


def thread_env(threads: int) -> dict[str, str]:
    """Pin the thread pools before torch starts them, not only after."""
    value = str(threads)
    return {"OMP_NUM_THREADS": value, "MKL_NUM_THREADS": value, "OPENBLAS_NUM_THREADS": value}


def compile_env(scratch: str) -> dict[str, str]:
    """Every compile in a worker is cold: Inductor's on-disk caches off, in a scratch dir.

    Otherwise a workload's second group would load the first group's compiled code and
    its "cold compile" would time a cache hit.
    """
    return {
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
        "TORCHINDUCTOR_CACHE_DIR": f"{scratch}/inductor",
        "TRITON_CACHE_DIR": f"{scratch}/triton",
    }


class SideWorker:
    """One side's worker; threads and affinity are applied again whenever it restarts."""

    def __init__(self, ctx: RunContext, side: Side, settings: BenchSettings) -> None:
        self.side = side
        self._settings = settings
        scratch = str(ctx.work_dir / "bench-compile" / side.name)
        self._worker: WorkerProcess = ctx.new_worker(
            side.role, env_vars={**thread_env(settings.threads), **compile_env(scratch)}
        )
        self.configured: dict[str, Any] | None = None

    def start(self) -> CallResult:
        # Importing torch on a busy machine can outlast a short benchmark timeout.
        result = self._worker.call(
            f"{_TIMING}:configure",
            {"threads": self._settings.threads, "cpus": list(self._settings.cpus) or None},
            max(self._settings.timeout_s, _START_TIMEOUT_S),
        )
        if result.ok:
            self.configured = result.value
        return result

    def call(self, func: str, kwargs: dict[str, Any], timeout_s: float | None = None) -> CallResult:
        if not self._worker.alive():
            started = self.start()
            if not started.ok:
                return started
        return self._worker.call(func, kwargs, timeout_s or self._settings.timeout_s)

    def close(self) -> None:
        self._worker.close()


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


def at_once(calls: list[Callable[[], object]]) -> None:
    """Run ``calls`` on threads of their own and wait for all of them."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


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
        on_group: Callable[[int], None] = lambda _: None,
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
        self.on_group = on_group  # told the number of groups done after each one
        self.profiles = profiles  # dispatch profiles kept from earlier runs, if any
        self.rooflines = rooflines  # and rooflines
        self.result = Measurements()
        self._reported: set[str] = set()
        self._cold_of: dict[str, str] = {}  # a compiled workload's step id -> its cold id

    # workers ----------------------------------------------------------------------------
    def _start_group(self, group: int) -> dict[str, SideWorker]:
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
        return workers

    # the schedule -----------------------------------------------------------------------
    def run(self, plan: PlanBenchmarks) -> Measurements:
        """Measure every benchmark ``plan(device)`` returns, over the round groups."""
        started = time.monotonic()
        specs: list[dict[str, Any]] = []
        for group in range(self.settings.groups):
            group_started = time.monotonic()
            workers = self._start_group(group)
            try:
                if group == 0:
                    specs = self._plan(workers, plan)
                self._group(group, workers, specs)
            finally:
                # At once: a worker's exit (torch's teardown) takes 0.3-0.5 s, and nothing
                # is timed until the next group's workers have started.
                at_once([worker.close for worker in workers.values()])
            self.result.groups_run = group + 1
            self.on_group(group + 1)
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
            if spec["kind"] == "workload_cold":
                self._cold_of[spec["step"]] = spec["id"]
        return specs

    def _roofline(self, workers: dict[str, SideWorker], specs: list[dict[str, Any]]) -> None:
        """Each environment's measured peaks, once (or kept from an earlier run of the same
        fixed environment), for the roofline of its benchmarks."""
        if not any(s["kind"] in ROOFLINE_KINDS for s in specs):
            return
        request = probe_request(specs, self.result.device)
        kept_as = {**request, "threads": self.settings.threads, "cpus": list(self.settings.cpus)}
        for worker in self._one_per_role(workers):
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

    def _first_of_role(self, role: str) -> Side:
        return next(side for side in self.sides if side.role == role)

    def _one_per_role(self, workers: dict[str, SideWorker]) -> list[SideWorker]:
        seen: dict[str, SideWorker] = {}
        for side in self.sides:
            seen.setdefault(side.role, workers[side.name])
        return list(seen.values())

    def _group(
        self, group: int, workers: dict[str, SideWorker], specs: list[dict[str, Any]]
    ) -> None:
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
            self._oneshot(group, workers, oneshot)
        if group == 0:
            self._roofline(workers, specs)
        steady = [s for s in specs if s["kind"] not in ONESHOT_KINDS + RANKED_KINDS + DERIVED_KINDS]
        for spec in self.rng.sample(steady, len(steady)):
            samples = self.result.benchmarks[spec["id"]]
            if samples.measuring:
                self.progress(f"group {group + 1}/{self.settings.groups}: {spec['id']}")
                self._steady(group, workers, samples)
        ranked = [
            s
            for s in specs
            if s["kind"] in RANKED_KINDS and self.result.benchmarks[s["id"]].measuring
        ]
        if ranked:
            self.progress(f"group {group + 1}/{self.settings.groups}: collectives")
            self._collectives(group, workers, ranked)

    def _fail(self, samples: BenchmarkSamples, side: str, outcome: CallResult) -> None:
        error = outcome.error.removeprefix("UserCodeFailed: ")
        if samples.spec["kind"] == "workload" and outcome.status == "timeout":
            error += (
                " (the workload hung, or its setup, compile or calls took longer); "
                "fix the hang or raise its timeout_s"
            )
        samples.failed[side] = {
            "status": outcome.status,
            "error": error[:1000],
            "stderr_tail": (outcome.stderr_tail or outcome.traceback)[-1500:],
        }

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

    def _steady(
        self, group: int, workers: dict[str, SideWorker], samples: BenchmarkSamples
    ) -> None:
        bench_id = samples.bench_id
        min_sample_s = self.settings.min_sample_ms / 1000
        timeout_s = samples.spec.get("timeout_s")  # a workload's own, else the run's
        numbers = {}
        slots: dict[str, int] = {}
        # A user's workload records its outputs once per environment, for the numerics.
        recording = (
            {
                side.role: str(numerics_dir(self.ctx.work_dir, bench_id, side.role))
                for side in self.sides
            }
            if samples.spec["kind"] == "workload" and group == 0
            else {}
        )
        preparing = self.rng.sample(self.sides, len(self.sides))
        prepared: dict[str, CallResult] = {}

        def prepare(side: Side, spread: bool) -> None:
            kwargs = {
                "bench_id": bench_id,
                "spec": spec_for_side(samples.spec, side.name),
                "number": samples.number,
                "min_sample_s": min_sample_s,
                "warmup_max_s": self.settings.warmup_max_s,
                "spread": spread,
            }
            if side.role in recording and side == self._first_of_role(side.role):
                kwargs["numerics_dir"] = recording[side.role]
            prepared[side.name] = workers[side.name].call(f"{_TIMING}:prepare", kwargs, timeout_s)

        if samples.number is None or samples.spec["kind"] == "workload":
            # The first preparation calibrates the inner loop on the clock, and a workload's
            # times its own cold compile: one at a time.
            for side in preparing:
                prepare(side, spread=False)
        else:
            # Later ones only warm up, which is never timed: all sides at once, on every
            # CPU (pinned to the timed one they would queue for it while the others idle).
            at_once([partial(prepare, side, spread=True) for side in preparing])
        for slot, side in enumerate(preparing):
            outcome = prepared[side.name]
            if not outcome.ok:
                self._fail(samples, side.name, outcome)
            elif "skipped" in outcome.value:
                samples.skipped[side.name] = outcome.value["skipped"]
            else:
                numbers[side.name] = outcome.value["number"]
                slots[side.name] = slot
                samples.warmups.setdefault(side.name, []).append(outcome.value["warmup"])
                if "facts" in outcome.value:
                    samples.extras.setdefault(side.name, []).append(outcome.value["facts"])
        self._derived(group, samples, slots)
        if samples.stopped:
            self._release(workers, bench_id)
            return
        # One inner-loop count and batch size for every side and group, fixed once: the
        # count from the slowest side's calibration, the batch so that slow benchmarks
        # still get many short rounds (pairs, not samples, carry the statistics).
        if samples.number is None:
            samples.number = max(numbers.values())
            sample_s = samples.number * max(w[-1]["per_call_s"] for w in samples.warmups.values())
            samples.batch_size = max(
                1,
                min(
                    self.settings.samples_per_round,
                    int(self.settings.max_batch_ms / 1000 / max(sample_s, 1e-9)),
                ),
            )
        measured = 0.0
        order: list[Side] = []
        for round_index in range(self.settings.rounds):
            # Stop on time, never on what the samples say (that would bias the test), and
            # only after a reversed round, so order stays balanced.
            if round_index % 2 == 0 and measured >= self.settings.group_budget_s:
                break
            order = self._round_order(round_index, order)
            for slot, side in enumerate(order):
                outcome = workers[side.name].call(
                    f"{_TIMING}:sample",
                    {
                        "bench_id": bench_id,
                        "count": samples.batch_size,
                        "number": samples.number,
                    },
                    timeout_s,
                )
                if not outcome.ok:
                    self._fail(samples, side.name, outcome)
                    self._derived(group, samples, {})
                    self._release(workers, bench_id)
                    return
                measured += outcome.duration_s
                samples.add(
                    side.name,
                    Batch(
                        group,
                        round_index,
                        slot,
                        tuple(outcome.value["times_s"]),
                        tuple(outcome.value["cpu_s"]),
                    ),
                )
        samples.measure_s += measured
        if group == 0 and samples.spec["kind"] != "synthetic":  # what ran is known there
            for worker in self._one_per_role(workers):
                samples.dispatch[worker.side.role] = self._dispatch(worker, samples)
        self._release(workers, bench_id)

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

    def _round_order(self, round_index: int, previous: list[Side]) -> list[Side]:
        """Random order in even rounds, its reverse in odd ones (A B, B A, ...).

        Going first or second in a round shifts a time by a few percent (the cache the
        previous process left behind); reversing exactly balances that shift between the
        sides instead of leaving it to chance.
        """
        if round_index % 2 and previous:
            return previous[::-1]
        return self.rng.sample(self.sides, len(self.sides))

    def _release(self, workers: dict[str, SideWorker], bench_id: str) -> None:
        """Every side drops the benchmark at once: nothing is timed while they collect."""
        at_once(
            [
                partial(worker.call, f"{_TIMING}:release", {"bench_id": bench_id})
                for worker in workers.values()
            ]
        )

    def _refused(
        self, samples: BenchmarkSamples, side: str, outcome: CallResult, answer: dict[str, Any]
    ) -> bool:
        """Record a broken call, or an answer that says failed or skipped; True if no sample."""
        if not outcome.ok:
            self._fail(samples, side, outcome)
            return True
        for refusal in ("failed", "skipped"):
            if refusal in answer:
                getattr(samples, refusal)[side] = answer[refusal]
                return True
        return False

    def _collectives(
        self, group: int, workers: dict[str, SideWorker], specs: list[dict[str, Any]]
    ) -> None:
        """One fresh set of ranks per side, group and (world size, backend)."""
        by_world: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for spec in specs:
            if not self.result.benchmarks[spec["id"]].stopped:
                by_world.setdefault((spec["world_size"], spec["backend"]), []).append(spec)
        for (world, backend), entries in by_world.items():
            for slot, side in enumerate(self.rng.sample(self.sides, len(self.sides))):
                outcome = workers[side.name].call(
                    BENCH_COLLECTIVES,
                    {
                        "entries": entries,
                        "world_size": world,
                        "backend": backend,
                        "rounds": self.settings.rounds,
                        "samples": self.settings.samples_per_round,
                        "min_sample_s": self.settings.min_sample_ms / 1000,
                        "budget_s": self.settings.group_budget_s / len(self.sides),
                        "timeout_s": self.settings.timeout_s * 0.9,
                    },
                    self.settings.timeout_s,
                )
                for spec in entries:
                    samples = self.result.benchmarks[spec["id"]]
                    answer = outcome.value[spec["id"]] if outcome.ok else {}
                    if self._refused(samples, side.name, outcome, answer):
                        continue
                    for round_index, times in enumerate(answer["batches"]):
                        samples.add(side.name, Batch(group, round_index, slot, tuple(times)))
                    samples.measure_s += answer["measure_s"]
                    samples.number = answer["number"]

    def _oneshot(
        self, group: int, workers: dict[str, SideWorker], specs: list[dict[str, Any]]
    ) -> None:
        """Each sample is a fresh interpreter started from the side's worker."""
        jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for spec in specs:
            if not self.result.benchmarks[spec["id"]].stopped:
                key = ("startup", "") if spec["kind"] == "startup" else ("compile", spec["model"])
                jobs.setdefault(key, []).append(spec)
        for (kind, model), entries in jobs.items():
            func = BENCH_ONESHOT[kind]
            kwargs: dict[str, Any] = {
                "device": entries[0]["device"],
                "threads": self.settings.threads,
                "timeout_s": self.settings.timeout_s * 0.9,
            }
            if kind == "startup":
                kwargs["measures"] = [s["measure"] for s in entries]
            else:
                kwargs.update(
                    model=model,
                    backend=entries[0]["backend"],
                    min_sample_s=self.settings.min_sample_ms / 1000,
                )
            for index in range(self.settings.oneshot_samples):
                round_index = group * self.settings.oneshot_samples + index
                for slot, side in enumerate(self.rng.sample(self.sides, len(self.sides))):
                    outcome = workers[side.name].call(func, kwargs, self.settings.timeout_s)
                    for spec in entries:
                        samples = self.result.benchmarks[spec["id"]]
                        if samples.stopped:
                            continue
                        value = outcome.value if outcome.ok else {}
                        if self._refused(samples, side.name, outcome, value):
                            continue
                        key = spec["measure"] if kind == "startup" else spec["phase"]
                        samples.add(
                            side.name,
                            Batch(group, round_index, slot, (float(value["seconds"][key]),)),
                        )
                        samples.extras.setdefault(side.name, []).append(
                            {k: v for k, v in value.items() if k != "seconds"}
                        )
                        samples.measure_s += outcome.duration_s / len(entries)
