"""Compile phases timed, graphs and graph breaks counted, in a worker of its own per side.

The orchestrator starts the worker for this explanation with Inductor's caches disabled and
pointed at an empty folder (``envs/worker_env.compile_env``), so every compile is cold. The
first compile of a process also imports and initialises the compiler, so a one-op function
is compiled first, untimed. Each repeat after ``torch._dynamo.reset()`` is a cold compile
whose phases (Dynamo tracing, AOTAutograd, Inductor lowering, code generation and kernel
compile, as the bench's one-shot compile samples split them) come from torch's own
compile-time metrics (``torch._dynamo.utils.compilation_time_metrics``, the same in torch
2.13 and 2.14), and whose graphs, graph breaks and their reasons come from Dynamo's
counters. These are runs of their own, never samples of the A/B comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import torch

from torchcanary.worker.bench.oneshot import _model, _phase_seconds

_REASON_CHARS = 300
# The step built for each spec, with its device and compile options, kept for the next
# round of compiles in this worker (building a user's model is not what is measured).
_BUILT: dict[str, tuple[Callable[[], Any], str, dict[str, Any]]] = {}


def _step(spec: dict[str, Any]) -> tuple[Callable[[], Any], str, dict[str, Any]]:
    """The step to compile, its device and the ``torch.compile`` options, from a bench spec:
    a user's workload (its ``target``) or the bench's one-shot compile model."""
    device = str(spec.get("device", "cpu"))
    if "target" in spec:
        from torchcanary.worker.bench.user_workload import load_target, seed_everything

        seed_everything()
        step = load_target(str(spec["target"]))(**spec.get("params", {}))
        options = dict(spec.get("compile") or {})
        if options.get("mode", "default") == "default":
            options.pop("mode", None)
        return step, device, options
    model = _model(str(spec["model"]), device)
    x = torch.randn(32, 256, device=device)
    return (lambda: model(x)), device, {"backend": str(spec.get("backend", "inductor"))}


def _one_compile(step: Callable[[], Any], device: str, options: dict[str, Any]) -> dict[str, Any]:
    from torch._dynamo import utils

    torch._dynamo.reset()
    utils.compilation_time_metrics.clear()
    utils.counters.clear()
    compiled = torch.compile(step, **options)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.no_grad():
        compiled()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    total_s = time.perf_counter() - started
    reasons = {
        str(reason)[:_REASON_CHARS]: int(count)
        for reason, count in utils.counters["graph_break"].items()
    }
    return {
        "total_s": total_s,
        "phases": _phase_seconds(),
        "graphs": int(utils.counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(reasons.values())),
        "break_reasons": reasons,
    }


def sample(spec: dict[str, Any], repeats: int = 5) -> dict[str, Any]:
    """``repeats`` cold compiles of the spec's step: each one's seconds, phases, graphs
    and graph breaks with their reasons."""
    key = json.dumps(spec, sort_keys=True)
    if key not in _BUILT:
        step, device, options = _BUILT[key] = _step(spec)
        warm = torch.ones(4, device=device)
        _one_compile(lambda: warm + 1, device, options)  # the compiler's own start-up
    step, device, options = _BUILT[key]
    return {
        "repeats": [_one_compile(step, device, options) for _ in range(int(repeats))],
        "backend": str(options.get("backend", "inductor")),
        "torch_version": torch.__version__,
    }
