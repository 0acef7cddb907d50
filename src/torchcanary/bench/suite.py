"""Turns the bench settings into the concrete list of benchmark specs a run measures.

Each spec is a JSON mapping (see :mod:`torchcanary.worker.bench.specs`) with its ``id``; the
device is resolved before this is called, so a spec names where it runs.
"""

from __future__ import annotations

import itertools
from typing import Any

from torchcanary.bench.settings import TABLE, BenchSettings
from torchcanary.worker.bench.specs import (
    COLLECTIVE,
    COMPILE,
    STARTUP,
    WORKLOAD,
    WORKLOAD_COLD,
    benchmark_id,
    with_defaults,
)
from torchcanary.workload_spec import parse_workload


def _with_id(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "id": benchmark_id(spec)}


def _linear(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id(
            {
                "kind": "linear",
                "input": shape,
                "batch": batch,
                "k": k,
                "n": n,
                "dtype": dtype,
                "device": device,
            }
        )
        for dtype, shape, batch, k, n in itertools.product(
            table["dtypes"], table["inputs"], table["batch"], table["k"], table["n"]
        )
    ]


def _gemm(kind: str, table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id({"kind": kind, "m": m, "k": k, "n": n, "dtype": dtype, "device": device})
        for dtype, (m, k, n) in itertools.product(table["dtypes"], table["shapes"])
    ]


def _sdpa(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id({"kind": "sdpa", **shape, "dtype": dtype, "device": device})
        for dtype, shape in itertools.product(table["dtypes"], table["shapes"])
    ]


def _copy(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id({"kind": "copy", "numel": numel, "dtype": dtype, "device": device})
        for dtype, numel in itertools.product(table["dtypes"], table["numel"])
    ]


def _startup(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id({"kind": STARTUP, "measure": measure, "device": device})
        for measure in table["measures"]
    ]


def _compile(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    return [
        _with_id(
            {
                "kind": COMPILE,
                "model": model,
                "phase": phase,
                "backend": table["backend"],
                "device": device,
            }
        )
        for model in table["models"]
        for phase in ("cold", "step")
    ]


def _collectives(table: dict[str, Any], device: str) -> list[dict[str, Any]]:
    backend = table["backend"]
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    return [
        _with_id(
            {
                "kind": COLLECTIVE,
                "op": op,
                "bytes": size,
                "world_size": world,
                "backend": backend,
                "device": device,
            }
        )
        for op, world, size in itertools.product(table["ops"], table["world_sizes"], table["bytes"])
    ]


def expand(settings: BenchSettings, device: str) -> list[dict[str, Any]]:
    """Every benchmark of the run, in a stable order, duplicates dropped."""
    specs: list[dict[str, Any]] = []
    for family in settings.families:
        table = settings.family(family)
        if family == "linear":
            specs += _linear(table, device)
        elif family in ("gemm", "scaled_gemm"):
            specs += _gemm(family, table, device)
        elif family == "sdpa":
            specs += _sdpa(table, device)
        elif family == "copy":
            specs += _copy(table, device)
        elif family == "startup":
            specs += _startup(table, device)
        elif family == "compile":
            specs += _compile(table, device)
        elif family == "collectives":
            specs += _collectives(table, device)
    workloads = [parse_workload({"target": target}, section=TABLE) for target in settings.workloads]
    for extra in [*settings.benchmarks, *workloads]:
        spec = with_defaults(extra, device)
        specs.append(_with_id(spec) if "id" not in spec else spec)
        if spec["kind"] == WORKLOAD and spec.get("mode") == "compile":
            specs.append(_with_id({**spec, "kind": WORKLOAD_COLD, "step": specs[-1]["id"]}))
    unique: dict[str, dict[str, Any]] = {}
    for spec in specs:
        unique.setdefault(spec["id"], spec)
    return list(unique.values())
