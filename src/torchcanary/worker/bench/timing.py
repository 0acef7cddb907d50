"""Times steady-state workloads inside one worker: pin, warm up, calibrate, sample.

Called over the worker protocol, one small step at a time, so the orchestrator can
interleave baseline and candidate round by round. A prepared workload stays in this
process between calls (``_PREPARED``) until released.

Clocks: on CPU a sample is the monotonic ``perf_counter_ns`` around an inner loop, with
the process CPU time beside it (the share of wall time spent on a CPU shows when other
processes took the cores). On CUDA it is CUDA events around the loop on the current
stream, synchronised before and after.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from torchcanary.worker.bench.workloads import Workload, WorkloadSkipped, build

T = TypeVar("T")

_MAX_NUMBER = 10_000_000
_WARMUP_WINDOW = 5
_WARMUP_STEP_S = 0.002


@dataclass
class _Prepared:
    workload: Workload
    number: int


_PREPARED: dict[str, _Prepared] = {}
_UNPINNED: list[int] = []  # the CPUs this worker could use before configure pinned it
_PINNED: list[int] = []  # the CPUs configure chose: where every timed sample runs


def unpinned_cpus() -> list[int]:
    """The CPUs the worker was allowed before :func:`configure`: what ranks of a collective
    spread over (pinned ranks would share the timed benchmarks' one core)."""
    return list(_UNPINNED)


def _set_affinity(cpus: list[int]) -> None:
    """Every thread of this process on ``cpus`` (torch's pools included)."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task), cpus)


@contextlib.contextmanager
def _spread() -> Iterator[None]:
    """Untimed work on every CPU the worker had, then back on the pinned ones.

    The sides of a group warm up at once, and pinned they would queue for one core while
    the others idle. Nothing here is timed: samples are taken pinned, each after an untimed
    run that refills the caches of the core it runs on.
    """
    if not (_UNPINNED and _PINNED) or _UNPINNED == _PINNED:
        yield
        return
    _set_affinity(_UNPINNED)
    try:
        yield
    finally:
        _set_affinity(_PINNED)


def configure(threads: int, cpus: list[int] | None = None) -> dict[str, Any]:
    """Fix the thread count and CPU affinity of this process, and say what they are now."""
    import torch

    from torchcanary.worker.devices import available_devices

    if hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        _UNPINNED[:] = allowed
        chosen = [c for c in (cpus or allowed[-threads:]) if c in allowed] or allowed
        _PINNED[:] = chosen
        _set_affinity(chosen)
    torch.set_num_threads(threads)
    # What is loaded by now (torch's modules, hundreds of thousands of objects) lives as
    # long as the worker: left out of every later collection, the release after each
    # benchmark collects only what the benchmarks made (0.3 s a collection on a loaded
    # 2-CPU machine, under 1 ms frozen). Samples run with the collector off either way.
    gc.freeze()
    clock = time.get_clock_info("perf_counter")
    return {
        "pid": os.getpid(),
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
        "clock": {
            "name": clock.implementation,
            "monotonic": clock.monotonic,
            "resolution_s": clock.resolution,
        },
        "devices": list(available_devices()),
    }


def _run_batch(workload: Workload, number: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``number`` calls, device work included."""
    call = workload.call
    workload.synchronize()
    cpu_start = time.process_time_ns()
    start = time.perf_counter_ns()
    for _ in range(number):
        call()
    workload.synchronize()
    wall = time.perf_counter_ns() - start
    return wall * 1e-9, (time.process_time_ns() - cpu_start) * 1e-9


def _run_batch_cuda(workload: Workload, number: int) -> tuple[float, float]:
    """Device seconds of ``number`` calls between two CUDA events on the current stream."""
    import torch

    call = workload.call
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    cpu_start = time.process_time_ns()
    begin.record()
    for _ in range(number):
        call()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) * 1e-3, (time.process_time_ns() - cpu_start) * 1e-9


def _timer(workload: Workload):  # type: ignore[no-untyped-def]
    return _run_batch_cuda if workload.device.startswith("cuda") else _run_batch


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _warm_up(workload: Workload, max_s: float, tolerance: float) -> dict[str, Any]:
    """Run until two successive windows agree within ``tolerance`` (or ``max_s`` is spent).

    A fixed warm-up count is either wasted time or too short, depending on the workload
    (allocator growth, lazy kernel selection, cache fill); settling is what we wait for.
    """
    timer = _timer(workload)
    on_cpu = workload.device == "cpu"
    started = time.perf_counter()
    first, _ = timer(workload, 1)
    step = max(1, math.ceil(_WARMUP_STEP_S / max(first, 1e-9)))
    windows: list[float] = []
    current: list[float] = []
    calls = 1
    while True:
        wall, cpu = timer(workload, step)
        calls += step
        # On CPU, judge settling on CPU time: time spent waiting for a core is the
        # machine's noise, not the workload still warming up.
        current.append((cpu if on_cpu and cpu > 0 else wall) / step)
        if len(current) == _WARMUP_WINDOW:
            windows.append(_median(current))
            current = []
            if len(windows) >= 2 and abs(windows[-1] / windows[-2] - 1) <= tolerance:
                return {
                    "calls": calls,
                    "seconds": time.perf_counter() - started,
                    "settled": True,
                    "per_call_s": windows[-1],
                }
        if time.perf_counter() - started >= max_s:
            estimate = windows[-1] if windows else _median(current or [first])
            return {
                "calls": calls,
                "seconds": time.perf_counter() - started,
                "settled": False,
                "per_call_s": estimate,
            }


def _calibrate_number(workload: Workload, per_call_s: float, min_sample_s: float) -> int:
    """The smallest inner-loop count whose batch lasts at least ``min_sample_s``."""
    timer = _timer(workload)
    number = max(1, math.ceil(min_sample_s / max(per_call_s, 1e-9)))
    while number <= _MAX_NUMBER:
        wall, _ = timer(workload, number)
        if wall >= min_sample_s:
            return number
        number = max(number + 1, math.ceil(number * min_sample_s / max(wall, 1e-9) * 1.2))
    raise WorkloadSkipped(
        f"{_MAX_NUMBER} calls take under {min_sample_s * 1e3:g} ms: the "
        "workload does no measurable work; give it larger sizes"
    )


def _build(spec: dict[str, Any], numerics_dir: str | None) -> Workload:
    if spec["kind"] == "workload":
        from torchcanary.worker.bench import user_workload

        return user_workload.build(spec, numerics_dir)
    return build(spec)


def _warming(spec: dict[str, Any], workload: Workload, call: Callable[[], T]) -> T:
    """``call()``; a user's workload that raises is reported as its own failure
    (``UserCodeFailed``), not as the harness's."""
    try:
        return call()
    except WorkloadSkipped:
        raise
    except Exception as exc:
        if spec["kind"] != "workload":
            raise
        from torchcanary.worker.bench.user_workload import describe_failure

        name = str(spec["target"]).rsplit(":", 1)[-1]
        raise describe_failure(exc, name, "while warming up", workload.device) from exc


def prepare(
    bench_id: str,
    spec: dict[str, Any],
    number: int | None = None,
    min_sample_s: float = 0.005,
    warmup_max_s: float = 1.0,
    warmup_tolerance: float = 0.05,
    numerics_dir: str | None = None,
    spread: bool = False,
) -> dict[str, Any]:
    """Build, warm up and (unless ``number`` is given) calibrate one benchmark.

    Returns ``{"skipped": reason}`` for a benchmark that cannot run here, so one bad shape
    never costs the worker or the run. ``spread`` builds and warms up on every CPU the
    worker had (:func:`_spread`), for groups whose sides warm up at once; a calibration,
    which times, never spreads.
    """
    release(bench_id)
    try:
        with _spread() if spread and number is not None else contextlib.nullcontext():
            workload = _build(spec, numerics_dir)
            warmup = _warming(
                spec, workload, partial(_warm_up, workload, warmup_max_s, warmup_tolerance)
            )
        if number is None:
            per_call_s = warmup["per_call_s"]
            number = _warming(
                spec, workload, partial(_calibrate_number, workload, per_call_s, min_sample_s)
            )
    except WorkloadSkipped as exc:
        return {"skipped": str(exc)}
    _PREPARED[bench_id] = _Prepared(workload, int(number))
    answer = {"number": int(number), "warmup": warmup, "device": workload.device}
    if workload.facts is not None:
        answer["facts"] = workload.facts()
    return answer


def sample(bench_id: str, count: int, number: int | None = None) -> dict[str, list[float]]:
    """``count`` samples of seconds per call (wall or device) and CPU seconds per call.

    ``number`` overrides the calibrated inner-loop count, so every side and every round
    group times the same loop.
    """
    prepared = _PREPARED[bench_id]
    if number is not None:
        prepared.number = int(number)
    timer = _timer(prepared.workload)
    times, cpu = [], []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside one sample is noise the other side may not get
    try:
        # Untimed: the process that ran just before this one left its data in the caches.
        timer(prepared.workload, max(1, prepared.number // 4))
        for _ in range(count):
            wall, cpu_s = timer(prepared.workload, prepared.number)
            times.append(wall / prepared.number)
            cpu.append(cpu_s / prepared.number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {"times_s": times, "cpu_s": cpu}


def prepared_workload(bench_id: str) -> Workload:
    return _PREPARED[bench_id].workload


def release(bench_id: str) -> None:
    """Drop a benchmark's tensors so the next one starts from the same memory state.

    The sides release at once and nothing is timed, so the collection runs on every CPU
    the worker had: pinned, the three sides' collections queued for one core (0.2 s a
    benchmark and group, against 0.06 s for one collection).
    """
    if _PREPARED.pop(bench_id, None) is not None:
        with _spread():
            gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass  # releasing is best effort; the worker ends with its round group anyway
