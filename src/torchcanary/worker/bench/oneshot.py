"""Benchmarks that only happen once per process: import, first call, cold compile.

Each sample is a fresh interpreter (``python -m torchcanary.worker.bench.oneshot``) started by
the side's worker, because the second import or the second compile in a process measures
caches, not the thing users wait for. This module therefore imports torch only inside the
child, after its clock has started. Compile samples run with Inductor's caches disabled and
pointed at an empty directory, so every sample is cold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from torchcanary.worker.ending import end_now

# The first compile phase name found in torch's compile-time metrics, per phase; names
# moved between releases, so each phase lists the spellings seen.
_PHASES = {
    "dynamo": ("_compile.compile_inner", "_compile"),
    "aot_autograd": ("create_aot_dispatcher_function", "aot_collect_metadata"),
    "inductor": ("compile_fx_inner", "fx_codegen_and_compile"),
    "codegen_and_cpp_compile": ("GraphLowering.compile_to_fn", "GraphLowering.compile_to_module"),
}


def _run_child(
    mode: str, options: dict[str, Any], timeout_s: float, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(extra_env or {})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "torchcanary.worker.bench.oneshot", mode, json.dumps(options)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {
            "failed": {
                "status": "timeout",
                "error": f"{mode} sample took over {timeout_s:g} s",
                "stderr_tail": "",
            }
        }
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {
            "failed": {
                "status": "error" if done.returncode > 0 else "crashed",
                "error": f"{mode} child exited {done.returncode}: "
                + (done.stderr.strip().splitlines() or [""])[-1][:400],
                "stderr_tail": done.stderr[-1500:],
            }
        }
    return dict(json.loads(lines[-1]))


def startup_sample(
    measures: list[str], device: str, threads: int, timeout_s: float
) -> dict[str, Any]:
    """Seconds for ``import torch`` and each first call, from one fresh interpreter."""
    return _run_child(
        "startup", {"measures": measures, "device": device, "threads": threads}, timeout_s
    )


def compile_sample(
    model: str, backend: str, device: str, threads: int, min_sample_s: float, timeout_s: float
) -> dict[str, Any]:
    """Cold compile seconds (with phases), graph breaks, recompiles, then the step time."""
    with tempfile.TemporaryDirectory(prefix="canary-compile-") as scratch:
        return _run_child(
            "compile",
            {
                "model": model,
                "backend": backend,
                "device": device,
                "threads": threads,
                "min_sample_s": min_sample_s,
            },
            timeout_s,
            {
                "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
                "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "ind"),
                "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
            },
        )


# --- the child side -----------------------------------------------------------------------


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _first_call(call: Any, device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    call()
    _sync(device)
    return time.perf_counter() - start


def _child_startup(options: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    import torch
    import torch.nn.functional as F

    seconds: dict[str, float] = {"import_torch": time.perf_counter() - started}
    torch.set_num_threads(int(options["threads"]))
    device = options["device"]
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "device cuda requested but this torch sees no CUDA GPU"}
    measures = options["measures"]
    if "first_linear" in measures:
        x, weight = torch.randn(1, 1, 4096, device=device), torch.randn(4096, 4096, device=device)
        seconds["first_linear"] = _first_call(lambda: F.linear(x, weight), device)
    if "first_mm" in measures:
        a, b = torch.randn(512, 512, device=device), torch.randn(512, 512, device=device)
        seconds["first_mm"] = _first_call(lambda: torch.mm(a, b), device)
    if "first_sdpa" in measures:
        q = torch.randn(1, 8, 128, 64, device=device)
        seconds["first_sdpa"] = _first_call(
            lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), device
        )
    return {"seconds": seconds}


def _model(name: str, device: str):  # type: ignore[no-untyped-def]
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self, graph_break: bool) -> None:
            super().__init__()
            self.up = torch.nn.Linear(256, 1024)
            self.down = torch.nn.Linear(1024, 256)
            self.graph_break = graph_break

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = torch.nn.functional.gelu(self.up(x))
            if self.graph_break:
                torch._dynamo.graph_break()
            return self.down(hidden) + x

    return Mlp(graph_break=name == "mlp_graph_break").to(device).eval()


def _phase_seconds() -> dict[str, float]:
    """Seconds spent in each compile phase alone, from torch's own compile-time metrics.

    The metrics nest (Dynamo's time includes AOTAutograd's, which includes Inductor's, which
    includes code generation), so each phase is reported without the one inside it.
    """
    from torch._dynamo import utils

    metrics = getattr(utils, "compilation_time_metrics", {})
    nested = {}
    for phase, names in _PHASES.items():
        for name in names:
            if metrics.get(name):
                nested[phase] = float(sum(metrics[name]))
                break
    order = [phase for phase in _PHASES if phase in nested]
    return {
        phase: max(0.0, nested[phase] - (nested[order[i + 1]] if i + 1 < len(order) else 0))
        for i, phase in enumerate(order)
    }


def _child_compile(options: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch._dynamo.utils import counters

    torch.set_num_threads(int(options["threads"]))
    device = options["device"]
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "device cuda requested but this torch sees no CUDA GPU"}
    model = _model(options["model"], device)
    x = torch.randn(32, 256, device=device)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, backend=options["backend"])
        cold = _first_call(lambda: compiled(x), device)
        # Counted before the calls below, which may recompile and break again.
        phases = _phase_seconds()
        graph_breaks = int(sum(counters["graph_break"].values()))
        graphs_after_first = counters["stats"]["unique_graphs"]
        compiled(x)  # same shape: must not recompile
        compiled(torch.randn(48, 256, device=device))  # new batch size: may recompile
        recompiles = counters["stats"]["unique_graphs"] - graphs_after_first
        number, per_call = 1, _first_call(lambda: compiled(x), device)
        number = max(1, int(float(options["min_sample_s"]) / max(per_call, 1e-9)))
        steps = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(number):
                compiled(x)
            _sync(device)
            steps.append((time.perf_counter() - start) / number)
    steps.sort()
    return {
        "seconds": {"cold": cold, "step": steps[len(steps) // 2]},
        "phases": phases,
        "graph_breaks": graph_breaks,
        "graphs": int(graphs_after_first),
        "recompiles": int(recompiles),
        "torch_version": torch.__version__,
    }


def main() -> None:
    mode, options = sys.argv[1], json.loads(sys.argv[2])
    answer = _child_startup(options) if mode == "startup" else _child_compile(options)
    sys.stdout.write(json.dumps(answer) + "\n")
    if mode == "startup":
        # The worker waits for each sample's end before the next starts (1.5 to 3 s of
        # teardown a child on a loaded 2-CPU machine). A compile child ends normally:
        # Inductor's compile workers end with its teardown.
        end_now()


if __name__ == "__main__":
    main()
