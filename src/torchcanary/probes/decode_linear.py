"""Single-token decode through ``F.linear`` on MPS: the ``[B, 1, K]`` fast route and GEMV.

Both claims are about the MPS backend, so elsewhere they are not checkable; the CPU figures
of the same measurement are attached as information. The measurements are ratios taken
in one run, so machine speed cancels out:

* fast route: time of ``F.linear`` on ``[B, 1, K]`` over the same data shaped ``[B, K]``
  (the same arithmetic; a missing fast route shows as a large ratio, 8.5x before the fix);
* GEMV: time of a 1-row ``F.linear`` over the time to copy its weight once. Decoding is
  bound by reading the weight, so a real GEMV kernel takes about as long as that copy.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import device_sync, max_abs_error, median_seconds

_MAX_ROUTE_RATIO = 2.0
_MAX_GEMV_OVER_COPY = 2.0
_RELATIVE_TOLERANCE = 2e-2  # half-precision inputs, float accumulation


def _relative(actual: Any, expected: Any) -> float:
    return max_abs_error(actual, expected) / max(1.0, float(expected.abs().max().item()))


def _dtypes(device: str) -> list[Any]:
    import torch

    return [torch.float16, torch.bfloat16] if device != "cpu" else [torch.float32, torch.bfloat16]


def _route_figures(device: str, features: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per dtype: time ratio ``[B,1,K]`` / ``[B,K]`` and both shapes' error vs float64."""
    import torch
    import torch.nn.functional as F

    sync = device_sync(device)
    figures: dict[str, dict[str, float]] = {}
    for dtype in _dtypes(device):
        generator = torch.Generator().manual_seed(3)
        weight64 = torch.randn(features, features, generator=generator, dtype=torch.float64)
        tokens64 = torch.randn(4, features, generator=generator, dtype=torch.float64)
        weight = weight64.to(device=device, dtype=dtype)
        flat = tokens64.to(device=device, dtype=dtype)
        single = flat.unsqueeze(1)  # [B, 1, K]: one token per sequence
        reference = tokens64 @ weight64.T
        flat_s = median_seconds(partial(F.linear, flat, weight), repeats=repeats, sync=sync)
        single_s = median_seconds(partial(F.linear, single, weight), repeats=repeats, sync=sync)
        figures[str(dtype).removeprefix("torch.")] = {
            "b1k_over_bk": single_s / flat_s,
            "b1k_seconds": single_s,
            "bk_seconds": flat_s,
            "b1k_relative_error": _relative(F.linear(single, weight).squeeze(1), reference),
            "bk_relative_error": _relative(F.linear(flat, weight), reference),
        }
    return figures


def run_fast_route(context: ProbeContext) -> Outcome:
    """Claim: on MPS, ``F.linear`` with a ``[B, 1, K]`` input takes the fast route, so it
    costs about the same as the ``[B, K]`` input holding the same numbers.

    Decides on MPS in fp16 and bf16 with K = N = 4096: the time ratio must stay under 2
    (the release cites 8.5 before the fix) and both results within 2e-2 of float64.
    """
    if "mps" not in context.devices:
        figures = _route_figures("cpu", 1024, repeats=15)
        return not_checkable(
            "not checked: needs an Apple-Silicon GPU (mps); CPU ratios shown as information",
            cpu_information=figures,
        )
    figures = _route_figures("mps", 4096, repeats=20)
    return _decide_route(figures)


def _decide_route(figures: dict[str, dict[str, float]]) -> Outcome:
    slow = [d for d, f in figures.items() if f["b1k_over_bk"] > _MAX_ROUTE_RATIO]
    wrong = [
        d
        for d, f in figures.items()
        if max(f["b1k_relative_error"], f["bk_relative_error"]) > _RELATIVE_TOLERANCE
    ]
    if slow or wrong:
        return refuted(
            f"[B,1,K] on MPS: slow in {slow}, inaccurate in {wrong}",
            figures=figures,
            max_ratio=_MAX_ROUTE_RATIO,
        )
    worst = max(f["b1k_over_bk"] for f in figures.values())
    return confirmed(
        f"[B,1,K] costs at most {worst:.2f}x of [B,K] on MPS, results match",
        figures=figures,
        max_ratio=_MAX_ROUTE_RATIO,
    )


def _gemv_figures(device: str, features: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per dtype: 1-row linear time over weight-copy time, and its error vs float64."""
    import torch
    import torch.nn.functional as F

    sync = device_sync(device)
    figures: dict[str, dict[str, float]] = {}
    for dtype in _dtypes(device):
        generator = torch.Generator().manual_seed(5)
        weight64 = torch.randn(features, features, generator=generator, dtype=torch.float64)
        vector64 = torch.randn(features, generator=generator, dtype=torch.float64)
        weight = weight64.to(device=device, dtype=dtype)
        vector = vector64.to(device=device, dtype=dtype)
        gemv_s = median_seconds(partial(F.linear, vector, weight), repeats=repeats, sync=sync)
        copy_s = median_seconds(weight.clone, repeats=repeats, sync=sync)
        figures[str(dtype).removeprefix("torch.")] = {
            "gemv_over_weight_copy": gemv_s / copy_s,
            "gemv_seconds": gemv_s,
            "weight_copy_seconds": copy_s,
            "relative_error": _relative(F.linear(vector, weight), weight64 @ vector64),
        }
    return figures


def run_gemv(context: ProbeContext) -> Outcome:
    """Claim: vector-matrix products on MPS run on GEMV kernels at weight-reading speed.

    Decides on MPS in fp16 and bf16 with a 4096-square weight: a 1-D ``F.linear`` must take
    at most 2x the time of copying the weight once (a copy moves twice the bytes), and
    match float64 within 2e-2.
    """
    if "mps" not in context.devices:
        figures = _gemv_figures("cpu", 1024, repeats=15)
        return not_checkable(
            "not checked: needs an Apple-Silicon GPU (mps); CPU ratios shown as information",
            cpu_information=figures,
        )
    figures = _gemv_figures("mps", 4096, repeats=20)
    slow = [d for d, f in figures.items() if f["gemv_over_weight_copy"] > _MAX_GEMV_OVER_COPY]
    wrong = [d for d, f in figures.items() if f["relative_error"] > _RELATIVE_TOLERANCE]
    if slow or wrong:
        return refuted(f"GEMV on MPS: slow in {slow}, inaccurate in {wrong}", figures=figures)
    return confirmed(
        "1-row F.linear on MPS runs at weight-copy speed and matches float64", figures=figures
    )


PROBES = (
    Probe(
        id="mps.decode-linear-b1k",
        claim="On MPS, F.linear over a single-token [B, 1, K] input is as fast as over "
        "the same [B, K] data, and correct.",
        release_claim="Decode fix: Single-token [B, 1, K] paths through F.linear were "
        "missing the fast route",
        scope="mps",
        run=run_fast_route,
        timeout_s=120,
        timed=True,
    ),
    Probe(
        id="mps.decode-gemv",
        claim="On MPS, vector-matrix F.linear runs on a GEMV kernel at the speed of "
        "reading the weight, and is correct.",
        release_claim="New GEMV kernels back the vector-matrix shapes common in "
        "autoregressive decoding",
        scope="mps",
        run=run_gemv,
        timeout_s=120,
        timed=True,
    ),
)
