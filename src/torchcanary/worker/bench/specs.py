"""What a benchmark is, as plain data both sides share: its spec, its work and its memory.

A benchmark spec is a JSON mapping with a ``kind`` (``linear``, ``gemm``, ``sdpa``...) and
its shape fields. The worker builds tensors from it; the orchestrator uses the same
arithmetic to place each result on the roofline. Standard library only, so the orchestrator
can import it without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Element sizes of the dtypes benchmarks may name; a name outside this table is a typo.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float64": 8,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
}
DTYPE_ALIASES = {
    "fp32": "float32",
    "fp64": "float64",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float": "float32",
    "fp8": "float8_e4m3fn",
}
SHORT_DTYPE = {
    "float32": "fp32",
    "float64": "fp64",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8e4m3",
    "float8_e5m2": "fp8e5m2",
    "int8": "int8",
}

# Steady-state kinds run many times in one long-lived worker; one-shot kinds need a fresh
# interpreter per sample (import time, first call, cold compile); collectives need ranks.
# A user's ``workload`` is steady too; in compile mode its cold compile is a second
# benchmark (``workload_cold``) whose one sample per group and side comes from the step's
# own preparation, so it is derived, never scheduled on its own.
# The kinds other modules test for by name (the bench, the calls and the explainers).
WORKLOAD = "workload"
WORKLOAD_COLD = "workload_cold"
STARTUP = "startup"
COMPILE = "compile"
COLLECTIVE = "collective"
STEADY_KINDS = ("linear", "gemm", "scaled_gemm", "sdpa", "copy", "synthetic", WORKLOAD)
ONESHOT_KINDS = (STARTUP, COMPILE)
RANKED_KINDS = (COLLECTIVE,)
DERIVED_KINDS = (WORKLOAD_COLD,)
ALL_KINDS = STEADY_KINDS + ONESHOT_KINDS + RANKED_KINDS


_SIZE_FIELDS = (
    "batch",
    "k",
    "n",
    "m",
    "heads",
    "q_len",
    "kv_len",
    "head_dim",
    "numel",
    "size",
    "bytes",
)


def canonical_dtype(name: str) -> str | None:
    """The canonical name for a dtype a user typed, or None when it is not one we know."""
    name = str(name).strip().lower().removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    return name if name in DTYPE_BYTES else None


@dataclass(frozen=True)
class Work:
    """The arithmetic and traffic of one call, and the memory its tensors need.

    ``bytes_moved`` counts each operand read once and each result written once: the least
    traffic any kernel needs, which is what a memory-bound roofline divides by.
    """

    flops: float
    bytes_moved: float
    memory_bytes: float

    @property
    def does_nothing(self) -> bool:
        return self.flops <= 0 and self.bytes_moved <= 0


def work_of(spec: dict[str, Any]) -> Work:
    """FLOPs, bytes and memory of one call of ``spec``; zero work for kinds without a model."""
    kind = spec["kind"]
    size = DTYPE_BYTES.get(str(spec.get("dtype", "float32")), 4)
    if any(int(spec[key]) <= 0 for key in _SIZE_FIELDS if key in spec):
        return Work(0.0, 0.0, 0.0)
    if kind == "linear":
        b, k, n = int(spec["batch"]), int(spec["k"]), int(spec["n"])
        traffic = (b * k + k * n + b * n) * size
        return Work(2.0 * b * k * n, traffic, traffic)
    if kind in ("gemm", "scaled_gemm"):
        m, n, k = int(spec["m"]), int(spec["n"]), int(spec["k"])
        out_size = 2 if kind == "scaled_gemm" else size
        traffic = (m * k + k * n) * size + m * n * out_size
        return Work(2.0 * m * n * k, traffic, traffic + m * n * 4)
    if kind == "sdpa":
        b, h = int(spec["batch"]), int(spec["heads"])
        q, kv, d = int(spec["q_len"]), int(spec["kv_len"]), int(spec["head_dim"])
        pairs = q * kv
        if spec.get("causal") and q == kv:
            pairs = q * (q + 1) // 2
        flops = 4.0 * b * h * pairs * d
        traffic = b * h * (2 * q * d + 2 * kv * d) * size
        # The unfused math path materialises the q x kv score matrix in fp32.
        return Work(flops, traffic, traffic + b * h * q * kv * 4)
    if kind == "copy":
        numel = int(spec["numel"])
        return Work(0.0, 2.0 * numel * size, 2.0 * numel * size)
    if kind == "synthetic":
        op = spec.get("op")
        if op == "matmul":
            s, repeat = int(spec["size"]), int(spec.get("repeat", 1))
            return Work(2.0 * s**3 * repeat, 3.0 * s * s * 4 * repeat, 3.0 * s * s * 4)
        if op == "busy":
            iterations = int(spec.get("iterations", 0))
            return Work(float(iterations), 0.0, 0.0)
        if op == "sleep":
            return Work(float(spec.get("seconds", 0.0) > 0), 0.0, 0.0)
    if kind == COLLECTIVE:
        return Work(0.0, float(spec["bytes"]), float(spec["bytes"]) * 3)
    return Work(0.0, 0.0, 0.0)


def with_defaults(spec: dict[str, Any], device: str) -> dict[str, Any]:
    """A user-written spec with what it may leave out filled in for ``device``."""
    filled = {"device": device, **spec}
    if filled["kind"] == "collective":
        filled.setdefault("backend", "nccl" if filled["device"] == "cuda" else "gloo")
        filled.setdefault("world_size", 2)
    return filled


def spec_for_side(spec: dict[str, Any], side: str) -> dict[str, Any]:
    """The spec one side runs: ``overrides`` lets the self-check make one side heavier."""
    overrides = spec.get("overrides", {}).get(side, {})
    return {k: v for k, v in {**spec, **overrides}.items() if k != "overrides"}


def benchmark_id(spec: dict[str, Any]) -> str:
    """A stable, readable key for a spec (the store key and the report's row name)."""
    kind = spec["kind"]
    dtype = SHORT_DTYPE.get(str(spec.get("dtype", "")), str(spec.get("dtype", "")))
    device = spec.get("device", "auto")
    if kind == "linear":
        shape = (
            f"[{spec['batch']},1,{spec['k']}]"
            if spec.get("input") == "3d"
            else f"[{spec['batch']},{spec['k']}]"
        )
        return f"linear/{shape}x[{spec['n']},{spec['k']}]/{dtype}/{device}"
    if kind in ("gemm", "scaled_gemm"):
        return f"{kind}/{spec['m']}x{spec['k']}x{spec['n']}/{dtype}/{device}"
    if kind == "sdpa":
        tag = "causal" if spec.get("causal") else "full"
        return (
            f"sdpa/b{spec['batch']}h{spec['heads']}q{spec['q_len']}kv{spec['kv_len']}"
            f"d{spec['head_dim']}-{tag}/{dtype}/{device}"
        )
    if kind == "copy":
        return f"copy/{spec['numel']}/{dtype}/{device}"
    if kind == "synthetic":
        extra = {
            k: v
            for k, v in sorted(spec.items())
            if k not in ("kind", "op", "label", "device", "id", "overrides")
        }
        label = spec.get("label") or ",".join(f"{k}={v}" for k, v in extra.items())
        return f"synthetic/{spec['op']}/{label}"
    if kind == STARTUP:
        return f"startup/{spec['measure']}"
    if kind == COMPILE:
        return f"compile/{spec['model']}/{spec['phase']}/{device}"
    if kind in (WORKLOAD, WORKLOAD_COLD):
        return workload_id(spec)
    if kind == COLLECTIVE:
        return (
            f"collective/{spec['op']}/{human_bytes(int(spec['bytes']))}/"
            f"{spec['backend']}x{spec['world_size']}"
        )
    raise ValueError(f"unknown benchmark kind {kind!r}")


def human_bytes(count: float) -> str:
    """``1048576`` -> ``1MiB``: short, exact for the powers of two message sizes use."""
    if count <= 0:
        return "0B"
    for power, unit in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        scale = 1024.0**power
        if count >= scale:
            value = count / scale
            text = f"{value:.0f}" if math.isclose(value, round(value)) else f"{value:.1f}"
            return text + unit
    return f"{int(count)}B"


def busbw_factor(op: str, world: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor (its PERFORMANCE.md).

    It makes figures comparable across rank counts: all_reduce moves 2(n-1)/n of the buffer
    over the busiest link; all_gather, reduce_scatter and all_to_all (n-1)/n; broadcast 1.
    """
    if op == "all_reduce":
        return 2.0 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world
    return 1.0


def workload_mode_tag(spec: dict[str, Any]) -> str:
    """``eager``, or ``compile-<backend>`` with a non-default compile mode appended."""
    if spec.get("mode", "eager") != "compile":
        return "eager"
    options = spec.get("compile") or {}
    tag = f"compile-{options.get('backend', 'inductor')}"
    if options.get("mode") not in (None, "default"):
        tag += f"-{options['mode']}"
    return tag


def workload_label(spec: dict[str, Any]) -> str:
    """The user's ``label``, else the target's function name with its parameters."""
    if spec.get("label"):
        return str(spec["label"])
    name = str(spec["target"]).rsplit(":", 1)[-1]
    params = spec.get("params") or {}
    if params:
        name += "[" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + "]"
    return name


def workload_id(spec: dict[str, Any]) -> str:
    """``workload/<label>/eager/<device>``; compiled: ``.../compile-<backend>/step|cold/...``."""
    tag = workload_mode_tag(spec)
    device = spec.get("device", "auto")
    if tag == "eager":
        return f"workload/{workload_label(spec)}/eager/{device}"
    phase = "cold" if spec["kind"] == "workload_cold" else "step"
    return f"workload/{workload_label(spec)}/{tag}/{phase}/{device}"
