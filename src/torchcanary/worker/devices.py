"""Which device kinds this environment can actually use (not which it was built for)."""

from __future__ import annotations


def available_devices() -> tuple[str, ...]:
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("rocm" if getattr(torch.version, "hip", None) else "cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found.append("xpu")
    return tuple(found)
