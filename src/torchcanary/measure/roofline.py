"""Places a benchmark's time on this machine's roofline (orchestrator side).

The bound is the longer of two times: the bytes it must move at the measured bandwidth, and
its FLOPs at the measured matmul peak for its dtype. GEMV-shaped linears end up memory
bound, large GEMMs compute bound; the fraction says how close the time came to that bound.
"""

from __future__ import annotations

from typing import Any

from torchcanary.measure.specs import busbw_factor, work_of

ROOFLINE_KINDS = ("linear", "gemm", "scaled_gemm", "sdpa", "copy")


def fraction(spec: dict[str, Any], median_s: float, probe: dict[str, Any]) -> dict[str, Any] | None:
    """Fraction of the limiting bound reached, which bound limits, and what was achieved.

    Above 1 means faster than the DRAM bound: the working set stayed in cache.
    """
    if spec["kind"] not in ROOFLINE_KINDS or median_s <= 0:
        return None
    work = work_of(spec)
    bandwidth = (probe.get("bandwidth") or {}).get("bytes_per_s")
    peaks = probe.get("peak") or {}
    # A dtype's own square-matmul rate can sit below what the machine does in fp32 (bf16
    # emulated on CPUs without bf16 units); the ceiling is the higher of the two.
    peak = (
        max(
            (
                peaks.get(name, {}).get("flops_per_s") or 0.0
                for name in (spec.get("dtype", ""), "float32")
            ),
            default=0.0,
        )
        or None
    )
    bounds = {}
    if bandwidth and work.bytes_moved:
        bounds["memory"] = work.bytes_moved / bandwidth
    if peak and work.flops:
        bounds["compute"] = work.flops / peak
    if not bounds:
        return {
            "note": "no roofline: "
            + "; ".join(f"{k}: {v}" for k, v in (probe.get("errors") or {}).items())
            or "no roofline measured"
        }
    limiter = max(bounds, key=lambda name: bounds[name])
    result = {
        "limiter": limiter,
        "fraction": bounds[limiter] / median_s,
        "bound_s": bounds[limiter],
        "achieved_bytes_per_s": work.bytes_moved / median_s,
        "achieved_flops_per_s": work.flops / median_s,
    }
    if work.flops and not peak:
        result["note"] = f"no {spec.get('dtype')} matmul peak measured: memory bound only"
    return result


def collective_bandwidth(spec: dict[str, Any], median_s: float) -> dict[str, float] | None:
    """nccl-tests' algbw (bytes / time) and busbw (algbw * its per-op factor)."""
    if spec["kind"] != "collective" or median_s <= 0:
        return None
    algbw = float(spec["bytes"]) / median_s
    return {
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * busbw_factor(spec["op"], int(spec["world_size"])),
    }
