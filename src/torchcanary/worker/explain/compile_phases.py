"""Compile phases timed, graphs and graph breaks counted, in a fresh interpreter per side.

The child (``python -m torchcanary.worker.explain.compile_phases``) compiles the benchmark's
step ``1 + repeats`` times, with Inductor's caches disabled and pointed at an empty folder:
the first compile of a process also imports and initialises the compiler, so it is kept
apart (``first_s``); each repeat after ``torch._dynamo.reset()`` is a cold compile whose
phases (Dynamo tracing, AOTAutograd, Inductor lowering, code generation and kernel compile,
as the bench's one-shot compile samples split them) come from torch's own compile-time
metrics (``torch._dynamo.utils.compilation_time_metrics``, the same in torch 2.13 and 2.14),
and whose graphs, graph breaks and their reasons come from Dynamo's counters. These are
runs of their own, never samples of the A/B comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

_REASON_CHARS = 300


def sample(spec: dict[str, Any], repeats: int = 5, timeout_s: float = 300.0) -> dict[str, Any]:
    """The repeats' phase seconds, graphs and breaks, or ``{"failed": why}``."""
    with tempfile.TemporaryDirectory(prefix="canary-explain-compile-") as scratch:
        env = {
            **os.environ,
            "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
            "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
        }
        options = json.dumps({"spec": spec, "repeats": int(repeats)})
        command = [sys.executable, "-m", "torchcanary.worker.explain.compile_phases", options]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=env
            )
        except subprocess.TimeoutExpired:
            return {"failed": f"compiling took over {timeout_s:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [""])[-1][:400]
        return {"failed": f"compile child exited {done.returncode}: {last}"}
    return dict(json.loads(lines[-1]))


# --- the child side -----------------------------------------------------------------------


def _step(spec: dict[str, Any]) -> tuple[Callable[[], Any], str, dict[str, Any]]:
    """The step to compile, its device and the ``torch.compile`` options, from a bench spec:
    a user's workload (its ``target``) or the bench's one-shot compile model."""
    import torch

    device = str(spec.get("device", "cpu"))
    if "target" in spec:
        from torchcanary.worker.bench.user_workload import load_target, seed_everything

        seed_everything()
        step = load_target(str(spec["target"]))(**spec.get("params", {}))
        options = dict(spec.get("compile") or {})
        if options.get("mode", "default") == "default":
            options.pop("mode", None)
        return step, device, options
    from torchcanary.worker.bench.oneshot import _model

    model = _model(str(spec["model"]), device)
    x = torch.randn(32, 256, device=device)
    return (lambda: model(x)), device, {"backend": str(spec.get("backend", "inductor"))}


def _one_compile(step: Callable[[], Any], device: str, options: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch._dynamo import utils

    from torchcanary.worker.bench.oneshot import _phase_seconds

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


def _child(options: dict[str, Any]) -> dict[str, Any]:
    import torch

    step, device, compile_options = _step(options["spec"])
    first = _one_compile(step, device, compile_options)
    repeats = [_one_compile(step, device, compile_options) for _ in range(options["repeats"])]
    return {
        "first_s": first["total_s"],
        "repeats": repeats,
        "backend": str(compile_options.get("backend", "inductor")),
        "torch_version": torch.__version__,
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(_child(json.loads(sys.argv[1]))) + "\n")
