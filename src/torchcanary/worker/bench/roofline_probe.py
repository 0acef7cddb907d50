"""Measures this machine's roofline as one environment sees it (worker side).

Two ceilings: memory bandwidth and matmul throughput per dtype (square ``torch.mm`` grown
until one call is long enough to time, best of a few).

Bandwidth depends on where the data lives: a benchmark that calls the same kernel on the
same tensors keeps its working set in whichever cache level holds it, and streams it far
faster than from DRAM. So the rate is measured at each benchmark's own working-set size
(repeated passes over one buffer of that size, exactly as the benchmark repeats its call),
and once more over a buffer twice the largest cache, which is the DRAM rate. Each rate is
the best of three ways to stream the buffer: a sum (reads it), a copy of one half onto the
other (reads and writes, each counted once) and a matrix-vector product (reads its matrix
once). The cache sizes the OS or driver reports name the level each size fits in.

Everything uses the thread count the benchmarks run with, since that is the ceiling they
can reach, and the clock they are judged on: process CPU time for one thread on the CPU
(other processes' turns on the core are not the machine's ceiling), wall time otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchcanary.worker.bench.roofline import cache_level

# The DRAM buffer is at least this and at least twice the largest cache, so repeated
# passes find nothing of it left in cache.
_DRAM_MIN_BYTES = {"cpu": 256 * 1024 * 1024, "cuda": 1024 * 1024 * 1024}
_DRAM_CACHE_MULTIPLE = 2
_SMALLEST_BYTES = 64 * 1024
_MIN_CALL_S = 0.02
_MIN_TIMED_S = 0.005  # one timed stretch of repeated passes; short ones are clock noise
_MAX_LOOPS = 1 << 16
# More tries than the matmul peak: a bound must be a best case, and bandwidth swings with
# what the machine's other tenants are streaming.
_STREAM_REPS = 10
_MAX_SQUARE = {"cpu": 4096, "cuda": 16384}
_CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


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


def _repeated(call: Callable[[], object], loops: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(loops):
            call()

    return run


def _best_per_call(call: Callable[[], object], device: str, budget_s: float) -> float:
    """Seconds per call, timing enough back-to-back calls that the clock can resolve them."""
    call()
    loops = 1
    while _seconds(_repeated(call, loops), device) < _MIN_TIMED_S and loops < _MAX_LOOPS:
        loops *= 2
    return _best(_repeated(call, loops), device, budget_s, _STREAM_REPS) / loops


def _parse_size(text: str) -> int:
    """Bytes from a sysfs cache size such as ``48K`` or ``260M``."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def cache_levels(device: str) -> list[dict[str, Any]]:
    """The data caches the OS (CPU) or driver (CUDA) reports, smallest first; [] if none."""
    levels: list[dict[str, Any]] = []
    if device == "cuda":
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)
        if l2_bytes:
            levels.append({"name": "L2", "bytes": int(l2_bytes), "source": "CUDA device"})
        return levels
    for index in sorted(_CPU_CACHES.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size > 0:
            name = f"L{level}{'d' if kind == 'Data' else ''}"
            levels.append({"name": name, "bytes": size, "source": str(_CPU_CACHES)})
    return sorted(levels, key=lambda entry: entry["bytes"])


def streamed_rate(device: str, size_bytes: int, budget_s: float) -> dict[str, Any]:
    """The best rate at which repeated passes streamed one buffer of ``size_bytes``."""
    columns = 4096 if size_bytes >= 4096 * 4 * 64 else 256
    rows = max(size_bytes // (4 * columns), 2)
    # Any finite values stream alike; filling is much cheaper than drawing random numbers.
    buffer = torch.full((rows * columns,), 0.5, device=device)
    half = buffer.numel() // 2
    source, target = buffer[:half], buffer[half : 2 * half]
    matrix = buffer.view(rows, columns)
    vector = torch.full((columns,), 0.5, device=device)
    nbytes = buffer.numel() * 4
    share = budget_s / 3
    rates = {
        "sum": nbytes / _best_per_call(buffer.sum, device, share),
        "copy": 2 * half * 4 / _best_per_call(lambda: target.copy_(source), device, share),
        "mv": nbytes / _best_per_call(lambda: torch.mv(matrix, vector), device, share),
    }
    return {"bytes": nbytes, "bytes_per_s": max(rates.values()), "by_method_bytes_per_s": rates}


def bandwidth(
    device: str, working_sets: list[int] | None = None, budget_s: float = 1.5
) -> dict[str, Any]:
    """DRAM bandwidth, and the rate at each working-set size smaller than the DRAM buffer."""
    levels = cache_levels(device)
    largest_cache = max((entry["bytes"] for entry in levels), default=0)
    dram_bytes = max(_DRAM_MIN_BYTES[device], _DRAM_CACHE_MULTIPLE * largest_cache)
    dram = streamed_rate(device, dram_bytes, budget_s)
    by_size = []
    for requested in sorted({int(size) for size in working_sets or [] if size < dram_bytes}):
        rate = streamed_rate(device, max(requested, _SMALLEST_BYTES), budget_s / 4)
        level = cache_level(rate["bytes"], levels)
        by_size.append({"requested": requested, **rate, "level": level})
    return {
        # The DRAM rate stays the headline figure: it is what a working set too large for
        # any cache (and every size not measured) is held to.
        "bytes_per_s": dram["bytes_per_s"],
        "by_method_bytes_per_s": dram["by_method_bytes_per_s"],
        "dram_buffer_bytes": dram["bytes"],
        "by_size": by_size,
        "caches": levels,
        "method": f"float32 buffers streamed by sum, copy of one half onto the other (read "
        f"and write counted) and matrix-vector product, repeated passes over one buffer, "
        f"best of up to 10 each; DRAM over {dram['bytes'] >> 20} MiB "
        f"({_DRAM_CACHE_MULTIPLE}x the largest reported cache, at least "
        f"{_DRAM_MIN_BYTES[device] >> 20} MiB), and at each benchmark's working-set size",
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


def measure(
    device: str, dtypes: list[str], working_sets: list[int] | None = None
) -> dict[str, Any]:
    """Bandwidth (DRAM and at each working set) and per-dtype matmul peak.

    A dtype that cannot multiply here, or a bandwidth that cannot be measured, is noted in
    ``errors`` and the rest is still measured.
    """
    result: dict[str, Any] = {
        "device": device,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "peak": {},
        "errors": {},
    }
    try:
        result["bandwidth"] = bandwidth(device, working_sets)
    except (RuntimeError, MemoryError) as exc:
        result["errors"]["bandwidth"] = f"{type(exc).__name__}: {exc!s:.300}"
    for dtype_name in dtypes:
        try:
            result["peak"][dtype_name] = matmul_peak(device, dtype_name)
        except (RuntimeError, MemoryError, AttributeError, TypeError) as exc:
            result["errors"][dtype_name] = f"{type(exc).__name__}: {exc!s:.300}"
    return result
