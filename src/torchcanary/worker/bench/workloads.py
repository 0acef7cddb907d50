"""Builds the callable a steady-state benchmark times, from its JSON spec (worker side).

Everything a user can get wrong (a shape too big for memory, a dtype this device or torch
lacks, a shape that does no work) becomes :class:`WorkloadSkipped` with one line naming the
problem and the fix, raised before anything large is allocated where that can be known.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from torchcanary.worker.bench.specs import human_bytes, work_of

# Leave this share of free memory alone: the allocator, the profiler and the rest of the
# process need room, and a benchmark that pushes the machine into swap measures the swap.
_MEMORY_HEADROOM = 0.7


class WorkloadSkipped(Exception):
    """This benchmark cannot run here; ``str()`` is the reason shown in the report."""


@dataclass
class Workload:
    """One benchmark's call, the device it runs on, and how to wait for that device."""

    call: Callable[[], object]
    device: str
    keepalive: tuple[Any, ...] = ()  # tensors the call closes over, released with it
    facts: Callable[[], dict[str, Any]] | None = None  # what a user's workload reports

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


def free_memory_bytes(device: str) -> float:
    """Memory this process could still allocate on ``device`` (cgroup limits included)."""
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info()
        return float(free)
    available = float("inf")
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as limit_file:
            limit = limit_file.read().strip()
        with open("/sys/fs/cgroup/memory.current") as current_file:
            current = float(current_file.read().strip())
        if limit != "max":
            available = min(available, float(limit) - current)
    except OSError:
        pass
    return available


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise WorkloadSkipped(
            f"torch {torch.__version__} has no dtype {name}; drop it from this benchmark's dtypes"
        )
    return dtype


def check_device(device: str) -> None:
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise WorkloadSkipped(
            "device cuda requested but this torch build sees no CUDA GPU; "
            'set device = "cpu" or run on a GPU machine'
        )
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise WorkloadSkipped(
            f"device {device!r} is not supported by the benchmarks; use cpu or cuda"
        )


def _random(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    if not dtype.is_floating_point:
        return torch.randint(-8, 8, shape, dtype=dtype, device=device)
    if dtype.itemsize == 1:  # float8: no randn kernel for it
        return torch.randn(shape, device=device).to(dtype)
    return torch.randn(shape, dtype=dtype, device=device)


def build(spec: dict[str, Any]) -> Workload:
    """The workload for ``spec``, exercised once so a dtype the device lacks fails here."""
    kind = spec["kind"]
    device = str(spec.get("device", "cpu"))
    check_device(device)
    work = work_of(spec)
    if work.does_nothing:
        raise WorkloadSkipped("this benchmark does no work (a size is 0); give positive sizes")
    free = free_memory_bytes(device)
    if work.memory_bytes > _MEMORY_HEADROOM * free:
        raise WorkloadSkipped(
            f"needs about {human_bytes(work.memory_bytes)} on {device} but "
            f"only {human_bytes(free)} is free; use smaller shapes"
        )
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise WorkloadSkipped(f"kind {kind!r} is not a steady-state benchmark")
    try:
        workload = builder(spec, device)
        workload.call()
        workload.synchronize()
    except WorkloadSkipped:
        raise
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise WorkloadSkipped(
            f"out of memory building it on {device} ({exc!s:.200}); use smaller shapes"
        ) from exc
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise WorkloadSkipped(
            f"{type(exc).__name__} on {device} with "
            f"{spec.get('dtype', 'this dtype')}: {first_line[:300]}"
        ) from exc
    return workload


def _linear(spec: dict[str, Any], device: str) -> Workload:
    dtype = torch_dtype(spec["dtype"])
    batch, k, n = int(spec["batch"]), int(spec["k"]), int(spec["n"])
    shape = (batch, 1, k) if spec.get("input") == "3d" else (batch, k)
    x = _random(shape, dtype, device)
    weight = _random((n, k), dtype, device)
    return Workload(lambda: F.linear(x, weight), device, (x, weight))


def _gemm(spec: dict[str, Any], device: str) -> Workload:
    dtype = torch_dtype(spec["dtype"])
    a = _random((int(spec["m"]), int(spec["k"])), dtype, device)
    b = _random((int(spec["k"]), int(spec["n"])), dtype, device)
    return Workload(lambda: torch.mm(a, b), device, (a, b))


def _scaled_gemm(spec: dict[str, Any], device: str) -> Workload:
    if not hasattr(torch, "_scaled_mm"):
        raise WorkloadSkipped(f"torch {torch.__version__} has no torch._scaled_mm")
    dtype = torch_dtype(spec["dtype"])
    m, n, k = int(spec["m"]), int(spec["n"]), int(spec["k"])
    a = _random((m, k), dtype, device)
    b = _random((n, k), dtype, device).t()  # the second operand must be column-major
    scale = torch.tensor(1.0, device=device)
    return Workload(
        lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16),
        device,
        (a, b, scale),
    )


def _sdpa(spec: dict[str, Any], device: str) -> Workload:
    dtype = torch_dtype(spec["dtype"])
    batch, heads, d = int(spec["batch"]), int(spec["heads"]), int(spec["head_dim"])
    q = _random((batch, heads, int(spec["q_len"]), d), dtype, device)
    k = _random((batch, heads, int(spec["kv_len"]), d), dtype, device)
    v = _random((batch, heads, int(spec["kv_len"]), d), dtype, device)
    causal = bool(spec.get("causal"))
    return Workload(
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), device, (q, k, v)
    )


def _copy(spec: dict[str, Any], device: str) -> Workload:
    dtype = torch_dtype(spec["dtype"])
    source = _random((int(spec["numel"]),), dtype, device)
    target = torch.empty_like(source)
    return Workload(lambda: target.copy_(source), device, (source, target))


def _synthetic(spec: dict[str, Any], device: str) -> Workload:
    """Workloads of known, adjustable cost, for checking the harness itself."""
    op = spec.get("op")
    if op == "busy":
        iterations = int(spec["iterations"])

        def busy() -> int:
            total = 0
            for step in range(iterations):
                total += step
            return total

        return Workload(busy, device)
    if op == "matmul":
        size, repeat = int(spec["size"]), int(spec.get("repeat", 1))
        a = torch.randn(size, size, device=device)
        b = torch.randn(size, size, device=device)

        def matmuls() -> None:
            for _ in range(repeat):
                torch.mm(a, b)

        return Workload(matmuls, device, (a, b))
    if op == "sleep":
        seconds = float(spec["seconds"])
        return Workload(lambda: time.sleep(seconds), device)
    raise WorkloadSkipped(f"unknown synthetic op {op!r}; use busy, matmul or sleep")


_BUILDERS: dict[str, Callable[[dict[str, Any], str], Workload]] = {
    "linear": _linear,
    "gemm": _gemm,
    "scaled_gemm": _scaled_gemm,
    "sdpa": _sdpa,
    "copy": _copy,
    "synthetic": _synthetic,
}
