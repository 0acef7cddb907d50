"""Builds a user's own workload inside a worker: import the target, set up, compile, check.

The target (``"pkg.module:function"`` or ``"/abs/path/file.py:function"``) is called once
with the spec's ``params``; what it returns is the step the harness times, so building the
model and making inputs stay outside the clock. Before it is handed to the harness:

- the random generators are seeded, so both versions build the same model from the same
  numbers and their outputs can be compared;
- in compile mode the step goes through ``torch.compile`` and its first call is the cold
  compile (the compiler's modules are imported before the clock starts, so whichever
  workload happens to compile first in a worker does not pay for that import); graphs,
  graph breaks (with their reasons) and recompiles come from Dynamo's own counters;
- two calls must return the same structure (types, shapes, dtypes): a step that does other
  work on each call cannot be timed as one thing;
- the first ``numerics_calls`` outputs are recorded (``torchcanary.numerics`` format) for the
  cross-version comparison, and the peak memory of setup plus those calls is read.

Everything the user's code gets wrong becomes :class:`UserCodeFailed` with one line naming
the problem and the fix; the bench records it for that benchmark and goes on.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchcanary import numerics
from torchcanary.worker.bench.workloads import Workload, check_device

_MAX_RECORDED_ELEMENTS = 1 << 22
_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


class UserCodeFailed(Exception):
    """The user's workload failed; ``str()`` is the one-line reason with its fix."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def describe_failure(exc: BaseException, name: str, where: str, device: str) -> UserCodeFailed:
    """One line for an exception from the user's code: out of memory is named as such."""
    if isinstance(exc, UserCodeFailed):
        return exc
    if isinstance(exc, MemoryError) or any(m in str(exc).lower() for m in _OOM_MARKERS):
        return UserCodeFailed(
            f"{name} ran out of memory on {device} {where} ({_one_line(exc)}); "
            "use smaller params or a machine with more memory"
        )
    return UserCodeFailed(f"{name} raised {_one_line(exc)} {where}; fix it or drop this workload")


def load_target(target: str) -> Callable[..., Any]:
    """The target function; a file target's folder goes on ``sys.path`` for its imports."""
    where, name = target.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            path = Path(where)
            folder = str(path.parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            module_name = f"_torchcanary_workload_{path.stem}"
            loader = importlib.util.spec_from_file_location(module_name, path)
            if loader is None or loader.loader is None:
                raise ImportError(f"{path} is not a Python file")
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except Exception as exc:
        raise UserCodeFailed(
            f"cannot import {where} ({_one_line(exc)}); install your project into both "
            "environments with --with '-e .' (bench.with) or fix the target"
        ) from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise UserCodeFailed(f"{where} has no function {name}; check the target's spelling")
    return function  # type: ignore[no-any-return]


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def structure(value: Any) -> str:
    """Types, shapes and dtypes of an output, with no values: what must not change per call."""
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}:{str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)):
        inner = ",".join(structure(item) for item in value[:16])
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        inner = ",".join(f"{k}:{structure(v)}" for k, v in sorted(value.items(), key=str)[:16])
        return "{" + inner + "}"
    return "None" if value is None else type(value).__name__


def _leaves(value: Any, path: str) -> list[tuple[str, torch.Tensor]]:
    """Every tensor (or number) in an output, named by where it sits."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, bool):
        return [(path, torch.tensor(value))]
    if isinstance(value, (int, float)):
        return [(path, torch.tensor(value, dtype=torch.float64))]
    if isinstance(value, (list, tuple)):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        items = sorted(value.items(), key=str)
        return [leaf for k, v in items for leaf in _leaves(v, f"{path}.{k}")]
    return []


def record_outputs(outputs: list[Any], directory: str) -> int:
    """Write each call's tensors as numerics records; returns how many were written."""
    saved = os.environ.get(numerics.DIR_VAR)
    os.environ[numerics.DIR_VAR] = directory
    written = 0
    try:
        for index, output in enumerate(outputs):
            for name, tensor in _leaves(output, f"call{index + 1}"):
                dtype = str(tensor.dtype).removeprefix("torch.")
                too_big = tensor.numel() > _MAX_RECORDED_ELEMENTS
                if too_big or dtype not in numerics.SUPPORTED_DTYPES:
                    continue
                numerics.record(name, tensor)
                written += 1
    finally:
        if saved is None:
            os.environ.pop(numerics.DIR_VAR, None)
        else:
            os.environ[numerics.DIR_VAR] = saved
    return written


class PeakMemory:
    """Peak memory above the starting point: CUDA's allocator stats, or the process's RSS."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.base = 0
        self.how = ""

    def start(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.how = "torch.cuda.max_memory_allocated above the allocation before setup"
            return
        self.base = _proc_status_kib("VmRSS") * 1024
        try:  # "5" resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+)
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")
            self.how = "process peak RSS (VmHWM, reset before setup) above the RSS before setup"
        except OSError as exc:
            self.how = f"not measured: cannot reset the peak RSS here ({exc.strerror})"

    def stop(self) -> dict[str, Any]:
        if self.how.startswith("not measured"):
            return {"bytes": None, "how": self.how}
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - self.base
        else:
            peak = _proc_status_kib("VmHWM") * 1024 - self.base
        return {"bytes": max(0, int(peak)), "how": self.how}


def _proc_status_kib(field: str) -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _load_compiler(backend: str) -> None:
    """Import the compiler stack untimed: module import is not this workload's compile."""
    import torch._dynamo

    if backend in ("inductor",):
        import torch._inductor.compile_fx  # noqa: F401


def _dynamo_counts() -> dict[str, Any]:
    from torch._dynamo.utils import counters

    reasons = sorted(counters["graph_break"].items(), key=lambda item: -item[1])
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "break_reasons": [str(reason)[:200] for reason, _count in reasons[:5]],
    }


def _timed(call: Callable[[], Any], device: str) -> tuple[Any, float]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    output = call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return output, time.perf_counter() - started


def build(spec: dict[str, Any], numerics_dir: str | None = None) -> Workload:
    """The user's step, set up, compiled if asked, checked; its facts ride on ``facts``."""
    device = str(spec.get("device", "cpu"))
    check_device(device)
    name = str(spec["target"]).rsplit(":", 1)[-1]
    target = load_target(str(spec["target"]))
    compiled = spec.get("mode") == "compile"
    options = dict(spec.get("compile") or {})
    if compiled:
        _load_compiler(str(options.get("backend", "inductor")))
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
    seed_everything()
    peak = PeakMemory(device)
    peak.start()
    stage = "in setup"
    try:
        step, setup_s = _timed(lambda: target(**spec.get("params", {})), device)
        if not callable(step):
            raise UserCodeFailed(
                f"{name} returned {type(step).__name__}, not a callable; return the step "
                "function to time (do the setup before returning it)"
            )
        call = step
        if compiled:
            mode = options.pop("mode", "default")
            call = torch.compile(step, **options, **({} if mode == "default" else {"mode": mode}))
        stage = "on its first call" + (" (while compiling)" if compiled else "")
        first, first_s = _timed(call, device)
        counts = _dynamo_counts() if compiled else {}
        stage = "on its second call"
        outputs = [first]
        for _ in range(max(2, int(spec.get("numerics_calls", 2))) - 1):
            outputs.append(call())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:
        raise describe_failure(exc, name, stage, device) from exc
    shapes = [structure(output) for output in outputs]
    if len(set(shapes)) > 1:
        raise UserCodeFailed(
            f"{name}'s step returns {shapes[0][:120]} on its first call but "
            f"{next(s for s in shapes if s != shapes[0])[:120]} later; a timed step must do "
            "the same work on every call (keep inputs and shapes fixed)"
        )
    recorded = 0
    if numerics_dir is not None:
        recorded = record_outputs(outputs[: int(spec.get("numerics_calls", 2))], numerics_dir)
    facts: dict[str, Any] = {
        "setup_s": setup_s,
        "first_call_s": first_s,
        "output": shapes[0][:200],
        "peak_memory": peak.stop(),
        "numerics_recorded": recorded,
        "torch_version": torch.__version__,
    }
    if compiled:
        facts.update(cold_compile_s=first_s, **counts)
    graphs_after_first = counts.get("graphs", 0)

    def current_facts() -> dict[str, Any]:
        if compiled:
            facts["recompiles"] = _dynamo_counts()["graphs"] - graphs_after_first
        return dict(facts)

    return Workload(call, device, (step, target), facts=current_facts)
