"""Which build differences between the two environments bear on which benchmarks.

A figure is only a torch-version comparison when nothing else differs; when the BLAS, the
CUDA build or Python differ too, the report says so beside each figure they affect.
"""

from __future__ import annotations

from typing import Any

_CPU_MATH = ("linear", "gemm", "scaled_gemm", "sdpa")
_EVERYTHING = (
    "linear",
    "gemm",
    "scaled_gemm",
    "sdpa",
    "copy",
    "startup",
    "compile",
    "collective",
    "synthetic",
)

# Manifest key -> benchmark kinds whose times it can move.
AFFECTS: dict[str, tuple[str, ...]] = {
    "torch_build_variant": _EVERYTHING,
    "cuda_version": ("startup", "compile"),
    "hip_version": ("startup", "compile"),
    "python_version": _EVERYTHING,
    "blas": _CPU_MATH,
    "mkldnn_version": _CPU_MATH,
    "openmp": (*_CPU_MATH, "copy", "compile"),
    "cpu_capability": (*_CPU_MATH, "copy", "compile"),
    "compiler": _EVERYTHING,
    "numpy_version": ("startup",),
    "torch_num_threads": (),  # the harness fixes the thread count on both sides
}
_GPU_AFFECTED = ("cuda_version", "hip_version")


def affecting(spec: dict[str, Any], confounds: dict[str, Any]) -> dict[str, list[Any]]:
    """The confounds (key -> [baseline, candidate]) that can move this benchmark's figure."""
    kind = spec["kind"]
    found = {}
    for key, values in confounds.items():
        kinds = AFFECTS.get(key, _EVERYTHING)
        if kind in kinds or (key in _GPU_AFFECTED and spec.get("device") == "cuda"):
            found[key] = list(values)
    return found
