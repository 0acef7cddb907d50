"""Records what a benchmark actually ran (worker side): operators, kernels, library calls.

A speed change is only half a finding; the other half is what changed underneath. Three
views, each from running the prepared workload: ``torch.profiler`` operators (and device
kernels on CUDA), and on CPU the oneDNN primitives and MKL routines the call reached, read
from those libraries' own verbose output (which is where a new GEMV path would show).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch

from torchcanary.worker.bench.timing import prepared_workload

_MKL_LINE = re.compile(r"^MKL_VERBOSE\s+([A-Z][A-Z0-9_]*)\(([^)]*)\)")


@contextlib.contextmanager
def _captured_stdout() -> Iterator[list[str]]:
    """Collect what C code prints on fd 1 (the libraries' verbose lines) while inside."""
    lines: list[str] = []
    libc = ctypes.CDLL(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        libc.fflush(None)
        os.dup2(sink.fileno(), 1)
        try:
            yield lines
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            lines += sink.read().decode(errors="replace").splitlines()


def _library_calls(lines: list[str]) -> dict[str, int]:
    calls: Counter[str] = Counter()
    for line in lines:
        mkl = _MKL_LINE.match(line)
        if mkl:
            args = [a for a in mkl.group(2).split(",") if not a.startswith("0x")][:5]
            calls[f"MKL {mkl.group(1)}({','.join(args)})"] += 1
        elif line.startswith("onednn_verbose") or line.startswith("dnnl_verbose"):
            fields = line.split(",")
            if "exec" in fields:
                at = fields.index("exec")
                engine, kind, impl = ([*fields[at + 1 : at + 4], "", "", ""])[:3]
                shape = fields[-2] if len(fields) > at + 5 else ""
                calls[f"oneDNN {engine} {kind} {impl} {shape}".strip()] += 1
    return dict(calls)


def _verbose_contexts() -> list[contextlib.AbstractContextManager[Any]]:
    contexts: list[contextlib.AbstractContextManager[Any]] = []
    mkldnn = getattr(torch.backends, "mkldnn", None)
    if mkldnn is not None and hasattr(mkldnn, "verbose") and mkldnn.is_available():
        contexts.append(mkldnn.verbose(mkldnn.VERBOSE_ON))
    mkl = getattr(torch.backends, "mkl", None)
    if mkl is not None and hasattr(mkl, "verbose") and mkl.is_available():
        contexts.append(mkl.verbose(mkl.VERBOSE_ON))
    return contexts


def profile(bench_id: str, calls: int = 3) -> dict[str, Any]:
    """Operators and kernels per call of a prepared benchmark, with their counts."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    workload = prepared_workload(bench_id)
    activities = [ProfilerActivity.CPU]
    if workload.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with torch_profile(activities=activities) as prof:
        for _ in range(calls):
            workload.call()
        workload.synchronize()
    ops: dict[str, float] = {}
    kernels: dict[str, float] = {}
    for event in prof.key_averages():
        target = kernels if str(getattr(event, "device_type", "")).endswith("CUDA") else ops
        target[event.key] = event.count / calls
    library: dict[str, int] = {}
    if workload.device == "cpu":
        with _captured_stdout() as lines, contextlib.ExitStack() as stack:
            for context in _verbose_contexts():
                stack.enter_context(context)
            workload.call()
        library = _library_calls(lines)
    return {
        "ops": ops,
        "kernels": kernels,
        "library_calls": library,
        "torch_version": torch.__version__,
    }
