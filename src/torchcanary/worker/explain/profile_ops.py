"""One profiled repeat of a prepared benchmark: what each operator (and kernel) cost.

The orchestrator prepares the benchmark with the bench's own ``timing.prepare`` and then
asks for several repeats, alternating the two environments, so each op's share of a
slowdown comes with an interval. Profiling perturbs timing, so these repeats are runs of
their own; nothing here is ever a sample of the A/B comparison.

Per operator: calls and *self* CPU time per benchmark call (self, so nested ops are not
counted twice). On CUDA the real path adds ``ProfilerActivity.CUDA``: per kernel name,
launches and device time per call (``self_device_time_total``). The loop's own wall time
per call is the whole the shares are fractions of; what no op accounts for (Python work,
waits, anything the profiler does not see) is the orchestrator's "unexplained".
"""

from __future__ import annotations

import time
from typing import Any

import torch

from torchcanary.worker.bench.timing import prepared_workload

_MAX_CALLS = 5000  # bounds the profiler's event memory on tiny benchmarks
# Shown as "not checked: <this>"; the CUDA path above is the real one, run where a GPU is.
_NO_KERNELS = "kernels: no GPU here (ProfilerActivity.CUDA gives each kernel's device time)"


def _calls_for(call: Any, synchronize: Any, min_s: float) -> int:
    """Enough calls that the profiled loop lasts ``min_s`` (one untimed call sizes it)."""
    synchronize()
    started = time.perf_counter()
    call()
    synchronize()
    per_call = max(time.perf_counter() - started, 1e-7)
    return max(1, min(_MAX_CALLS, int(min_s / per_call) + 1))


def _on_device(event: Any) -> bool:
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def _device_us(event: Any) -> float:
    # Renamed from the CUDA-only spelling in torch 2.4; both are read.
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def profile(bench_id: str, min_s: float = 0.2) -> dict[str, Any]:
    """Per op (and kernel) calls and seconds per benchmark call, and the wall time per call."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    workload = prepared_workload(bench_id)
    on_cuda = workload.device.startswith("cuda")
    calls = _calls_for(workload.call, workload.synchronize, min_s)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_cuda else [])]
    with torch_profile(activities=activities) as prof:
        workload.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            workload.call()
        workload.synchronize()
        wall_s = time.perf_counter() - started
    ops: dict[str, dict[str, float]] = {}
    kernels: dict[str, dict[str, float]] = {}
    for event in prof.key_averages():
        if _on_device(event):
            kernels[event.key] = {
                "calls": event.count / calls,
                "s": _device_us(event) / 1e6 / calls,
            }
        else:
            ops[event.key] = {
                "calls": event.count / calls,
                "s": event.self_cpu_time_total / 1e6 / calls,
            }
    return {
        "wall_s": wall_s / calls,
        "calls": calls,
        "ops": ops,
        "kernels": kernels,
        "kernels_not_checked": "" if on_cuda else _NO_KERNELS,
        "device": workload.device,
        "torch_version": torch.__version__,
    }
