"""Places a benchmark's time on this machine's roofline (orchestrator side).

The bound is the longer of two times: the bytes it must move at the bandwidth of the memory
level that holds its working set, and its FLOPs at the measured matmul peak for its dtype.
GEMV-shaped linears end up memory bound, large GEMMs compute bound; the fraction says how
close the time came to that bound.

A benchmark repeats one call on the same tensors, so a working set that fits in a cache is
streamed from that cache, not from DRAM. The worker therefore measures the streaming rate at
each benchmark's own working-set size (see :mod:`torchcanary.worker.bench.roofline_probe`), and
this module holds each benchmark to the rate at its size. A time faster than its bound is
never shown as a bare percentage over 100: it carries the reason (``above_bound``).
Standard library only: the worker imports :func:`cache_level` from here.
"""

from __future__ import annotations

from typing import Any

from torchcanary.worker.bench.specs import busbw_factor, human_bytes, work_of

ROOFLINE_KINDS = ("linear", "gemm", "scaled_gemm", "sdpa", "copy")
_MATMUL_KINDS = ("gemm", "scaled_gemm", "linear", "sdpa")
# A size that streams at least this much faster than the DRAM buffer is served by a cache.
_CACHE_SPEEDUP = 1.2


def cache_level(size_bytes: float, caches: list[dict[str, Any]]) -> str:
    """The smallest reported cache that holds ``size_bytes`` ("L2", "L3"...), else DRAM."""
    for entry in sorted(caches, key=lambda cache: cache["bytes"]):
        if size_bytes <= entry["bytes"]:
            return str(entry["name"])
    return "DRAM"


def probe_request(specs: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """What the worker's roofline probe measures for these benchmarks on ``device``.

    Every matmul dtype they use (float32 always, as the floor of the compute ceiling) and
    every working-set size, so each benchmark's memory bound is measured at its own size.
    """
    here = [s for s in specs if s.get("device") == device and s["kind"] in ROOFLINE_KINDS]
    dtypes = {"float32"} | {s["dtype"] for s in here if s["kind"] in _MATMUL_KINDS}
    sizes = {int(work_of(s).memory_bytes) for s in here}
    return {
        "device": device,
        "dtypes": sorted(dtypes),
        "working_sets": sorted(size for size in sizes if size > 0),
    }


def _memory_bound(working_set: float, bandwidth: dict[str, Any]) -> dict[str, Any]:
    """The streaming rate this working set is held to, where it was measured, and why."""
    caches = bandwidth.get("caches") or []
    dram_bytes = bandwidth.get("dram_buffer_bytes") or 0
    for measured in bandwidth.get("by_size") or []:
        if measured.get("requested") == int(working_set):
            reported = measured.get("level") or cache_level(measured["bytes"], caches)
            speedup = measured["bytes_per_s"] / bandwidth["bytes_per_s"]
            # The OS names the cache the size fits in; the rate says whether it acts like
            # one (a VM's share of a shared L3 can be far smaller than the L3 reported).
            level = reported if speedup >= _CACHE_SPEEDUP else "DRAM"
            basis = (
                f"streamed at this working set's size ({human_bytes(measured['bytes'])}: "
                f"{speedup:.2g}x the DRAM rate; {_level_text(reported, caches)})"
            )
            if level != reported:
                basis += f", yet under {_CACHE_SPEEDUP}x the DRAM rate here: counted as DRAM"
            # No working set streams slower than DRAM: a lower figure at its size is noise.
            return {
                "bandwidth_bytes_per_s": max(measured["bytes_per_s"], bandwidth["bytes_per_s"]),
                "memory_level": level,
                "bandwidth_basis": basis,
            }
    if dram_bytes and working_set >= dram_bytes:
        return {
            "bandwidth_bytes_per_s": bandwidth["bytes_per_s"],
            "memory_level": "DRAM",
            "bandwidth_basis": f"DRAM, streamed over {human_bytes(dram_bytes)}",
        }
    # An older probe (or a size it was not asked for): only the DRAM rate is known.
    level = cache_level(working_set, caches) if caches else "unknown"
    return {
        "bandwidth_bytes_per_s": bandwidth["bytes_per_s"],
        "memory_level": level,
        "bandwidth_basis": "DRAM only; not measured at this working set's size",
        "dram_only": True,
    }


def _level_text(level: str, caches: list[dict[str, Any]]) -> str:
    sizes = {entry["name"]: entry["bytes"] for entry in caches}
    if level in sizes:
        return f"fits in {level}, {human_bytes(sizes[level])} as reported by the OS or driver"
    if level == "DRAM" and caches:
        return "larger than every reported cache: DRAM"
    return f"level {level}"


def _peak(spec: dict[str, Any], peaks: dict[str, Any]) -> tuple[float | None, str]:
    """The matmul ceiling for ``spec``'s dtype, and how it was measured.

    A dtype's own square-matmul rate can sit below what the machine does in fp32 (bf16
    emulated on CPUs without bf16 units); the ceiling is the higher of the two.
    """
    measured = [
        peaks[name]
        for name in (spec.get("dtype", ""), "float32")
        if peaks.get(name, {}).get("flops_per_s")
    ]
    if not measured:
        return None, ""
    best = max(measured, key=lambda entry: entry["flops_per_s"])
    return float(best["flops_per_s"]), str(best.get("method", "a square matmul"))


def _above_bound_reason(placed: dict[str, Any], peak_method: str, probe: dict[str, Any]) -> str:
    """Why a time beat its bound, so the report never shows a bare fraction over 100 %."""
    if placed["limiter"] == "compute":
        return (
            f"faster than the matmul peak measured with {peak_method}: this shape ran "
            "more efficiently than the probe's; bound not applicable"
        )
    working_set = human_bytes(placed["working_set_bytes"])
    level = placed["memory_level"]
    if placed.get("dram_only"):
        caches = (probe.get("bandwidth") or {}).get("caches") or []
        where = (
            _level_text(level, caches)
            if level not in ("DRAM", "unknown")
            else "may still sit in a cache nobody reported"
        )
        return (
            f"working set {working_set} {where}, but only DRAM bandwidth was measured; "
            "bound not applicable"
        )
    return (
        f"working set {working_set} ({level}) streamed at "
        f"{placed['achieved_bytes_per_s'] / 1e9:.3g} GB/s, faster than the "
        f"{placed['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s the bandwidth probe reached at "
        "that size or from DRAM (its kernel reads memory better than sum, copy and "
        "matrix-vector did, or the probe met more contention); bound not applicable"
    )


def fraction(spec: dict[str, Any], median_s: float, probe: dict[str, Any]) -> dict[str, Any] | None:
    """Fraction of the limiting bound reached, which bound limits, and what was achieved.

    A fraction above 1 comes with ``above_bound``: the reason the bound did not hold.
    """
    if spec["kind"] not in ROOFLINE_KINDS or median_s <= 0:
        return None
    work = work_of(spec)
    bandwidth = probe.get("bandwidth") or {}
    peak, peak_method = _peak(spec, probe.get("peak") or {})
    bounds = {}
    memory: dict[str, Any] = {}
    if bandwidth.get("bytes_per_s") and work.bytes_moved:
        memory = _memory_bound(work.memory_bytes, bandwidth)
        bounds["memory"] = work.bytes_moved / memory["bandwidth_bytes_per_s"]
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
        "working_set_bytes": work.memory_bytes,
        **memory,
    }
    if work.flops and not peak:
        result["note"] = f"no {spec.get('dtype')} matmul peak measured: memory bound only"
    if result["fraction"] > 1:
        result["above_bound"] = _above_bound_reason(result, peak_method, probe)
    return result


def _short_reason(placed: dict[str, Any]) -> str:
    """The reason of ``above_bound`` in a few words, for a table cell."""
    if placed["limiter"] == "compute":
        return "faster than the measured matmul peak"
    if "working_set_bytes" not in placed:  # stored before working sets were measured
        return "the bound was DRAM bandwidth and the working set may sit in cache"
    working_set = human_bytes(placed["working_set_bytes"])
    level = placed.get("memory_level", "unknown")
    if placed.get("dram_only"):
        where = "" if level == "unknown" else f" in {level}"
        return f"working set {working_set}{where}, only DRAM bandwidth measured"
    return f"working set {working_set} ({level}) beat the rate measured at its size"


def describe(placed: dict[str, Any], detail: bool = False) -> str:
    """One side's place on the roofline in words; over 100 % only with its reason.

    A table cell gets the short form; ``detail`` adds the achieved rates, where the bound
    was measured, and the full reason. Results stored before working sets were measured
    carry no reason; they get the one that held for them (the bound was DRAM bandwidth).
    """
    if "fraction" not in placed:
        return str(placed.get("note", ""))
    limiter = placed["limiter"]
    if placed["fraction"] <= 1:
        text = f"{placed['fraction']:{'.1%' if detail else '.0%'}} of the {limiter} bound"
        if limiter == "memory" and placed.get("memory_level"):
            text += f" ({placed['memory_level']})"
    elif not detail:
        text = f"above the measured {limiter} bound: {_short_reason(placed)}; not applicable"
    else:
        reason = placed.get("above_bound") or _short_reason(placed) + "; bound not applicable"
        text = f"above the measured {limiter} bound ({placed['fraction']:.2f}x): {reason}"
    if not detail:
        return text
    text += (
        f"; {placed['achieved_bytes_per_s'] / 1e9:.3g} GB/s, "
        f"{placed['achieved_flops_per_s'] / 1e9:.3g} GFLOP/s achieved"
    )
    if placed.get("bandwidth_basis"):
        bandwidth = placed["bandwidth_bytes_per_s"] / 1e9
        text += f"; memory bound {bandwidth:.3g} GB/s, {placed['bandwidth_basis']}"
    if placed.get("note"):
        text += f"; {placed['note']}"
    return text


def collective_bandwidth(spec: dict[str, Any], median_s: float) -> dict[str, float] | None:
    """nccl-tests' algbw (bytes / time) and busbw (algbw * its per-op factor)."""
    if spec["kind"] != "collective" or median_s <= 0:
        return None
    algbw = float(spec["bytes"]) / median_s
    return {
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * busbw_factor(spec["op"], int(spec["world_size"])),
    }
