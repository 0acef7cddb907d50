"""Platform breadth: ROCm 7.14 wheels, Intel XPU graph capture, Inductor on Rubin (sm_107).

Each claim needs its hardware and is not checkable without it. What the build itself says
is still recorded as evidence, because it is a real observation of the wheel: the ROCm
version it was built against, whether XPU graph types exist, the CUDA architectures it
ships kernels for, and how Inductor's own arch helpers treat "107" (and whether they warn
that it is unknown).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import compiled_with_code, max_abs_error

_TOLERANCE = 1e-3  # relative, float32 on the device against float64 on the CPU


def _sample_function(x: Any, w: Any) -> Any:
    import torch

    return torch.sin(x) @ w + x.sum(dim=1, keepdim=True)


def _device_matches_reference(device: str, run: Callable[[Any, Any], Any]) -> float:
    """Relative error of ``run`` on ``device`` (float32) against float64 eager on the CPU."""
    import torch

    generator = torch.Generator().manual_seed(2)
    x = torch.randn(64, 64, generator=generator, dtype=torch.float64)
    w = torch.randn(64, 64, generator=generator, dtype=torch.float64)
    expected = _sample_function(x, w)
    got = run(x.float().to(device), w.float().to(device))
    return max_abs_error(got, expected) / max(1.0, float(expected.abs().max().item()))


def _eager_and_compiled(device: str) -> dict[str, float]:
    return {
        "eager_relative_error": _device_matches_reference(device, _sample_function),
        "compiled_relative_error": _device_matches_reference(
            device, lambda x, w: compiled_with_code(_sample_function, x, w)[0]
        ),
    }


def run_rocm(context: ProbeContext) -> Outcome:
    """Claim: the ROCm wheels are built on ROCm 7.14 and work.

    Decides on an AMD GPU: the build must report ROCm 7.14 and both an eager and an
    Inductor-compiled function on the GPU must match float64 on the CPU.
    """
    import torch

    hip = getattr(torch.version, "hip", None)
    if "rocm" not in context.devices:
        return not_checkable(
            "not checked: needs an AMD GPU with a ROCm build of torch",
            hip_version=hip,
            cuda_version=torch.version.cuda,
        )
    figures = _eager_and_compiled("cuda")  # ROCm devices are addressed as "cuda"
    if not str(hip).startswith("7.14"):
        return refuted(
            f"this ROCm wheel is built against ROCm {hip}, not 7.14", hip_version=hip, **figures
        )
    if max(figures.values()) > _TOLERANCE:
        return refuted("the ROCm 7.14 build computes wrong results", hip_version=hip, **figures)
    return confirmed(
        f"ROCm {hip} build ran eager and compiled code correctly", hip_version=hip, **figures
    )


def run_xpu_graph(context: ProbeContext) -> Outcome:
    """Claim: Intel XPU supports native graph capture (record once, replay).

    Decides on an Intel GPU: a sin/matmul sequence captured with ``torch.xpu.graph`` and
    replayed after new data is copied into its static input must match float64 eager.
    """
    import torch

    xpu = getattr(torch, "xpu", None)
    graph_api = {name: hasattr(xpu, name) for name in ("XPUGraph", "graph")}
    if "xpu" not in context.devices:
        return not_checkable("not checked: needs an Intel GPU (xpu)", xpu_graph_api=graph_api)
    if not all(graph_api.values()):
        return refuted("torch.xpu has no graph capture API", xpu_graph_api=graph_api)
    generator = torch.Generator().manual_seed(4)
    w64 = torch.randn(64, 64, generator=generator, dtype=torch.float64)
    w = w64.float().to("xpu")
    static_x = torch.zeros(64, 64, device="xpu")
    side = torch.xpu.Stream()
    side.wait_stream(torch.xpu.current_stream())
    with torch.xpu.stream(side):  # warm up outside the capture, as graph capture requires
        _sample_function(static_x, w)
    torch.xpu.current_stream().wait_stream(side)
    graph = torch.xpu.XPUGraph()
    with torch.xpu.graph(graph):
        static_out = _sample_function(static_x, w)
    errors = []
    for seed in (5, 6):
        x64 = torch.randn(
            64, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        )
        static_x.copy_(x64.float())
        graph.replay()
        torch.xpu.synchronize()
        expected = _sample_function(x64, w64)
        errors.append(
            max_abs_error(static_out, expected) / max(1.0, float(expected.abs().max().item()))
        )
    if max(errors) > _TOLERANCE:
        return refuted("replayed XPU graph gave wrong results", replay_errors=errors)
    return confirmed(
        "XPU graph captured once and replayed correctly on new inputs", replay_errors=errors
    )


def _inductor_arch_view() -> dict[str, Any]:
    """How Inductor's own arch helpers treat "107", with any warnings they log."""
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage()[:200])

    view: dict[str, Any] = {}
    helpers = (
        ("torch._inductor.codegen.cutlass.utils", "_normalize_cuda_arch"),
        ("torch._inductor.codegen.cuda.compile_utils", "_cuda_arch_with_compile_suffix"),
    )
    for module_name, function_name in helpers:
        handler = Collect(level=logging.WARNING)
        try:
            module = importlib.import_module(module_name)
            logging.getLogger(module_name).addHandler(handler)
            helper = getattr(module, function_name, None)
            view[f"{function_name}('107')"] = helper("107") if helper else "missing"
        except Exception as exc:
            view[f"{function_name}('107')"] = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            logging.getLogger(module_name).removeHandler(handler)
    view["warnings"] = warnings
    return view


def run_rubin(context: ProbeContext) -> Outcome:
    """Claim: Inductor targets NVIDIA Rubin (sm_107).

    Decides on an sm_107 GPU: an Inductor-compiled function must match float64 on the CPU
    and eager on the GPU must too. Elsewhere not checkable; the build's CUDA arch list and
    Inductor's handling of "107" are recorded as evidence.
    """
    import torch

    build = {
        "cuda_arch_list": torch.cuda.get_arch_list(),
        "sm_107_in_arch_list": "sm_107" in torch.cuda.get_arch_list(),
        "inductor": _inductor_arch_view(),
    }
    if "cuda" not in context.devices:
        return not_checkable(
            "not checked: needs an NVIDIA Rubin GPU (sm_107); no CUDA device here", build=build
        )
    capability = torch.cuda.get_device_capability()
    if capability != (10, 7):
        return not_checkable(
            "not checked: needs an NVIDIA Rubin GPU (sm_107); this GPU is "
            f"sm_{capability[0]}{capability[1]}",
            build=build,
        )
    figures = _eager_and_compiled("cuda")
    if max(figures.values()) > _TOLERANCE:
        return refuted("Inductor code on sm_107 computes wrong results", build=build, **figures)
    return confirmed("Inductor compiled and ran correctly on sm_107", build=build, **figures)


PROBES = (
    Probe(
        id="platform.rocm-7.14",
        claim="The ROCm wheels are built on ROCm 7.14 and run eager and compiled code correctly.",
        release_claim="Platform breadth: ROCm 7.14 wheels (TheRock SDK)",
        scope="rocm",
        run=run_rocm,
        timeout_s=300,
    ),
    Probe(
        id="platform.xpu-graph-capture",
        claim="Intel XPU can capture a sequence of ops into a graph and replay it correctly.",
        release_claim="Platform breadth: ... Intel XPU native graph capture",
        scope="xpu",
        run=run_xpu_graph,
        timeout_s=120,
    ),
    Probe(
        id="platform.rubin-sm107",
        claim="Inductor generates working code for NVIDIA Rubin GPUs (sm_107).",
        release_claim="Platform breadth: ... Inductor targeting NVIDIA Rubin (sm_107)",
        scope="cuda (sm_107)",
        run=run_rubin,
        timeout_s=300,
    ),
)
