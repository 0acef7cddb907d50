"""The modes a torch call ran under, captured with it and restored around its replay.

The same call computes another thing under ``no_grad``, ``inference_mode``, ``autocast``,
another default dtype or deterministic algorithms: an in-place update of a parameter is
allowed under ``no_grad`` only, ``autocast`` picks the matmul's dtype, deterministic mode
fills ``torch.empty`` with NaN and refuses some kernels. So each recorded call keeps
``{"grad", "inference", "default_dtype", "autocast": {device: dtype}, "deterministic":
false|true|"warn"}``, the recording tells calls apart by it, and the replay runs each call
under the modes it was recorded under (a recording without ``deterministic`` leaves it as
it is).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

_AUTOCAST_DEVICES = ("cpu", "cuda")


Modes = tuple[bool, bool, torch.dtype, tuple[tuple[str, torch.dtype], ...], bool | str]


def capture() -> Modes:
    """The modes in force in this thread now, as a key: taken at every recorded call, so
    kept cheap (no text); :func:`described` spells out the ones a sampled call keeps."""
    autocast: tuple[tuple[str, torch.dtype], ...] = ()
    if torch._C._is_any_autocast_enabled():  # one question for the usual case: none is on
        autocast = tuple(
            (device, torch.get_autocast_dtype(device))
            for device in _AUTOCAST_DEVICES
            if torch.is_autocast_enabled(device)
        )
    deterministic: bool | str = torch.are_deterministic_algorithms_enabled()
    if deterministic and torch.is_deterministic_algorithms_warn_only_enabled():
        deterministic = "warn"
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    return grad, inference, torch.get_default_dtype(), autocast, deterministic


def described(modes: Modes) -> dict[str, Any]:
    """The modes of :func:`capture` as a recorded call keeps them."""
    grad, inference, default_dtype, autocast, deterministic = modes
    return {
        "grad": grad,
        "inference": inference,
        "default_dtype": str(default_dtype),
        "autocast": {device: str(dtype) for device, dtype in autocast},
        "deterministic": deterministic,
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
        if "deterministic" in context:
            stack.enter_context(_deterministic(context["deterministic"]))
        yield


def prepare(contexts: list[Mapping[str, Any] | None]) -> None:
    """Do once, before any replayed call's clock starts, what restoring ``contexts`` costs
    the first time (deterministic mode's first switch imports Inductor's config)."""
    if any(context and context.get("deterministic") for context in contexts):
        torch.use_deterministic_algorithms(
            torch.are_deterministic_algorithms_enabled(),
            warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        )


@contextlib.contextmanager
def _deterministic(mode: bool | str) -> Iterator[None]:
    """Deterministic algorithms on (``True``, or ``"warn"``: warn only) or off; set only
    when that is another mode (setting it imports Inductor's config: seconds, once)."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_before = torch.is_deterministic_algorithms_warn_only_enabled()
    if (bool(mode), mode == "warn") == (before, before and warn_before):
        yield
        return
    torch.use_deterministic_algorithms(bool(mode), warn_only=mode == "warn")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_before)
