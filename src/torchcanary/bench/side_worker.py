"""One side's worker process for the bench, and what a broken call means for a benchmark.

Every round group gets a fresh worker per side (:mod:`.interleave`); this module starts
them pinned to the run's threads and CPUs, calls them, and records a call that failed,
skipped or hung on the benchmark it was for.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from torchcanary.bench.samples import BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.context import RunContext
from torchcanary.envs.worker_env import compile_env, thread_env
from torchcanary.envs.worker_process import CallResult, WorkerProcess
from torchcanary.worker.bench.specs import WORKLOAD
from torchcanary.worker.calls import BENCH_TIMING

_START_TIMEOUT_S = 180.0


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
            f"{BENCH_TIMING}:configure",
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

    def end(self) -> None:
        """End the worker with its round group: killed, not asked to exit.

        Nothing it holds is needed any more (every answer came back through its calls), and
        a polite exit runs torch's teardown, which on a loaded 2-CPU machine took 3 s a
        group with three sides ending at once, before the next group could start.
        """
        self._worker.kill()


def at_once(calls: list[Callable[[], object]]) -> None:
    """Run ``calls`` on threads of their own and wait for all of them."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@dataclass(frozen=True)
class GroupWorkers:
    """One round group's workers, one per side, and the schedule's random source."""

    group: int
    workers: dict[str, SideWorker]
    sides: list[Side]
    rng: random.Random

    def shuffled(self) -> list[Side]:
        """The sides in a fresh random order."""
        return self.rng.sample(self.sides, len(self.sides))

    def first_of_role(self, role: str) -> Side:
        return next(side for side in self.sides if side.role == role)

    def one_per_role(self) -> list[SideWorker]:
        """The worker of each environment's first side."""
        seen: dict[str, SideWorker] = {}
        for side in self.sides:
            seen.setdefault(side.role, self.workers[side.name])
        return list(seen.values())

    def release(self, bench_id: str) -> None:
        """Every side drops the benchmark at once: nothing is timed while they collect."""
        at_once(
            [
                partial(worker.call, f"{BENCH_TIMING}:release", {"bench_id": bench_id})
                for worker in self.workers.values()
            ]
        )


def record_failure(samples: BenchmarkSamples, side: str, outcome: CallResult) -> None:
    """Record a call that broke (raised, crashed or hung) as ``side``'s failure."""
    error = outcome.error.removeprefix("UserCodeFailed: ")
    if samples.spec["kind"] == WORKLOAD and outcome.status == "timeout":
        error += (
            " (the workload hung, or its setup, compile or calls took longer); "
            "fix the hang or raise its timeout_s"
        )
    samples.failed[side] = {
        "status": outcome.status,
        "error": error[:1000],
        "stderr_tail": (outcome.stderr_tail or outcome.traceback)[-1500:],
    }


def refused(
    samples: BenchmarkSamples, side: str, outcome: CallResult, answer: dict[str, Any]
) -> bool:
    """Record a broken call, or an answer that says failed or skipped; True if no sample."""
    if not outcome.ok:
        record_failure(samples, side, outcome)
        return True
    for refusal in ("failed", "skipped"):
        if refusal in answer:
            getattr(samples, refusal)[side] = answer[refusal]
            return True
    return False
