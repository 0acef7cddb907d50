"""Measures this machine's roofline as one environment sees it (worker side).

Two ceilings: memory bandwidth (the best of three ways to stream a large buffer: a copy,
counting the read and the write; a sum; a matrix-vector product, which reads its matrix
once) and matmul throughput per dtype (square ``torch.mm`` grown until one call is long
enough to time, best of a few). Both use the thread count the benchmarks run with, since
that is the ceiling they can reach, and the clock they are judged on: process CPU time for
one thread on the CPU (other processes' turns on the core are not the machine's ceiling),
wall time otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

_COPY_BYTES = {"cpu": 256 * 1024 * 1024, "cuda": 1024 * 1024 * 1024}
_MIN_CALL_S = 0.02
_MAX_SQUARE = {"cpu": 4096, "cuda": 16384}


def _seconds(call: Callable[[], object], device: str) -> float:
    if device == "cuda":
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        begin.record()
        call()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) * 1e-3
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    start = clock()
    call()
    return clock() - start


def _best(call: Callable[[], object], device: str, budget_s: float, reps: int = 5) -> float:
    call()  # first touch: page faults and lazy init are not the ceiling
    best = float("inf")
    deadline = time.perf_counter() + budget_s
    for _ in range(reps):
        best = min(best, _seconds(call, device))
        if time.perf_counter() > deadline:
            break
    return best


def bandwidth(device: str, budget_s: float = 1.5) -> dict[str, Any]:
    """The best rate at which this process streamed a large buffer through memory."""
    numel = _COPY_BYTES[device] // 4
    source = torch.rand(numel, device=device)
    target = torch.empty_like(source)
    matrix = source.view(-1, 4096)
    vector = torch.rand(4096, device=device)
    rates = {
        "copy": 2.0 * numel * 4 / _best(lambda: target.copy_(source), device, budget_s / 3),
        "sum": numel * 4 / _best(lambda: source.sum(), device, budget_s / 3),
        "mv": numel * 4 / _best(lambda: torch.mv(matrix, vector), device, budget_s / 3),
    }
    return {
        "bytes_per_s": max(rates.values()),
        "by_method_bytes_per_s": rates,
        "method": f"{numel * 4 >> 20} MiB float32 streamed by copy (read + write counted), "
        "sum and matrix-vector product; best of up to 5 each",
    }


def _matmul(size: int, dtype: torch.dtype, device: str) -> Callable[[], object]:
    """A square product in ``dtype``: ``torch.mm``, or ``torch._scaled_mm`` for float8."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    if dtype.itemsize == 1:
        scale = torch.tensor(1.0, device=device)
        b_major = b.t().contiguous().t()  # the second operand must be column-major
        return lambda: torch._scaled_mm(
            a, b_major, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16
        )
    return lambda: torch.mm(a, b)


def matmul_peak(device: str, dtype_name: str, budget_s: float = 2.0) -> dict[str, Any]:
    dtype = getattr(torch, dtype_name)
    size = 256
    while True:
        call = _matmul(size, dtype, device)
        if _seconds(call, device) >= _MIN_CALL_S or size >= _MAX_SQUARE[device]:
            break
        size *= 2
    seconds = _best(call, device, budget_s, reps=3)
    return {
        "flops_per_s": 2.0 * size**3 / seconds,
        "method": f"{'torch._scaled_mm' if dtype.itemsize == 1 else 'torch.mm'} "
        f"{size}x{size}, best of up to 3",
    }


def measure(device: str, dtypes: list[str]) -> dict[str, Any]:
    """Bandwidth and per-dtype matmul peak; a dtype that cannot multiply here is noted."""
    result: dict[str, Any] = {
        "device": device,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "peak": {},
        "errors": {},
    }
    try:
        result["bandwidth"] = bandwidth(device)
    except (RuntimeError, MemoryError) as exc:
        result["errors"]["bandwidth"] = f"{type(exc).__name__}: {exc!s:.300}"
    for dtype_name in dtypes:
        try:
            result["peak"][dtype_name] = matmul_peak(device, dtype_name)
        except (RuntimeError, MemoryError, AttributeError, TypeError) as exc:
            result["errors"][dtype_name] = f"{type(exc).__name__}: {exc!s:.300}"
    return result
