"""Which devices this environment can actually use (not which it was built for)."""

from __future__ import annotations

import os
from typing import Any


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


# The variables through which an engine hands a process its devices, by vendor (defined
# here, on the in-environment side, which may import nothing of the orchestrator's;
# ``node_kit/devices.py`` reads them from here).
VISIBLE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ONEAPI_DEVICE_SELECTOR",
    "NEURON_RT_VISIBLE_CORES",
    "TPU_VISIBLE_CHIPS",
    "HABANA_VISIBLE_MODULES",
    "ASCEND_RT_VISIBLE_DEVICES",
)


def device_view() -> dict[str, Any]:
    """The devices this environment's torch sees in a fresh process, as a fleet unit's
    record: the visible-devices variables as set here, the count and names torch reports
    (CUDA or ROCm), and Intel XPU and Apple MPS where present.

    Fresh, because torch reads the variables once, when it first initialises the device.
    """
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    view: dict[str, Any] = {
        "variables": {name: os.environ[name] for name in VISIBLE_VARIABLES if name in os.environ},
        "count": count,
        "names": [torch.cuda.get_device_name(index) for index in range(count)],
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
    }
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        view["xpu_count"] = xpu.device_count()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        view["mps"] = True
    return view
