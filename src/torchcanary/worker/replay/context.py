"""The modes a torch call ran under, captured with it and restored around its replay.

The same call computes another thing under ``no_grad``, ``inference_mode``, ``autocast``
or another default dtype: an in-place update of a parameter is allowed under ``no_grad``
only, ``autocast`` picks the matmul's dtype. So each recorded call keeps ``{"grad",
"inference", "default_dtype", "autocast": {device: dtype}}``, the recording tells calls
apart by it, and the replay runs each call under the modes it was recorded under.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

_AUTOCAST_DEVICES = ("cpu", "cuda")


def capture() -> dict[str, Any]:
    """The modes in force in this thread now."""
    autocast = {
        device: str(torch.get_autocast_dtype(device))
        for device in _AUTOCAST_DEVICES
        if torch.is_autocast_enabled(device)
    }
    return {
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "autocast": autocast,
    }


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."))
    assert isinstance(dtype, torch.dtype), name
    return dtype


@contextlib.contextmanager
def restored(context: Mapping[str, Any] | None) -> Iterator[None]:
    """Run the block under the modes ``context`` names (None: a recording without them)."""
    if not context:
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode(bool(context["inference"])))
        stack.enter_context(torch.set_grad_enabled(bool(context["grad"])))
        for device, dtype in context["autocast"].items():
            stack.enter_context(torch.autocast(device, dtype=_dtype(dtype)))
        stack.callback(torch.set_default_dtype, torch.get_default_dtype())
        torch.set_default_dtype(_dtype(context["default_dtype"]))
        yield
