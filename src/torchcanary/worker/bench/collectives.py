"""Times collectives on a live process group of local ranks (worker side).

``measure`` is called in a side's worker and starts fresh ranks through
:func:`~torchcanary.worker.multirank.run_ranks`; ``rank_main`` runs on each rank. On CPU the
ranks are forked from the worker (fresh for each round group, so the ranks are too), and
each rank may use every CPU the worker had before it was pinned for the timed benchmarks:
ranks sharing that one core would time the scheduler, not the collective. Sizes
follow nccl-tests: ``bytes`` is the whole buffer (the gathered output of all_gather, the
input of reduce_scatter), so algbw and busbw use nccl-tests' formulas
(:data:`torchcanary.worker.bench.specs.BUSBW_FACTOR`). A sample is the slowest rank's time per
operation, since a collective is done when its last rank is.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from torchcanary.worker.bench.timing import unpinned_cpus
from torchcanary.worker.calls import BENCH_COLLECTIVES_RANK
from torchcanary.worker.multirank import RanksFailed, can_fork, run_ranks


def _elements(op: str, size_bytes: int, world: int) -> int:
    count = max(size_bytes // 4, world)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count -= count % world
    return count


def _operation(op: str, count: int, world: int, device: str):  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist

    if op == "all_reduce":
        buffer = torch.ones(count, device=device)
        return lambda: dist.all_reduce(buffer)
    if op == "broadcast":
        buffer = torch.ones(count, device=device)
        return lambda: dist.broadcast(buffer, 0)
    if op == "all_gather":
        piece = torch.ones(count // world, device=device)
        gathered = torch.empty(count, device=device)
        return lambda: dist.all_gather_into_tensor(gathered, piece)
    if op == "reduce_scatter":
        whole = torch.ones(count, device=device)
        piece = torch.empty(count // world, device=device)
        return lambda: dist.reduce_scatter_tensor(piece, whole)
    if op == "all_to_all":
        source = torch.ones(count, device=device)
        target = torch.empty(count, device=device)
        return lambda: dist.all_to_all_single(target, source)
    raise ValueError(f"unknown collective {op!r}")


def _slowest(seconds: float, device: str) -> float:
    import torch
    import torch.distributed as dist

    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def _timed(call: Any, number: int, device: str) -> float:
    import torch
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    for _ in range(number):
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    return _slowest(time.perf_counter() - start, device)


def rank_main(
    rank: int,
    world: int,
    entries: list[dict[str, Any]],
    rounds: int,
    samples: int,
    min_sample_s: float,
    budget_s: float,
) -> dict[str, Any]:
    """Every entry measured on this rank; all ranks agree on counts through the group.

    Rounds stop after ``budget_s`` seconds of collectives per entry (at least two).
    """
    import torch

    device = entries[0]["device"] if entries else "cpu"
    if device == "cuda":
        # The rank's GPU on its own machine: on several nodes, rank and local rank differ.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for entry in entries:
        count = _elements(entry["op"], int(entry["bytes"]), world)
        try:
            call = _operation(entry["op"], count, world, device)
            call()
            once = _timed(call, 3, device) / 3  # also the warm-up
        except (RuntimeError, ValueError) as exc:
            results[entry["id"]] = {
                "skipped": f"{entry['op']} on {entry['backend']}: "
                f"{str(exc).strip().splitlines()[0][:300]}"
            }
            continue
        number = max(1, math.ceil(min_sample_s / max(once, 1e-9)))
        started = time.perf_counter()
        batches: list[list[float]] = []
        spent = 0.0  # the sum of all-reduced times: the same on every rank, so all stop together
        while len(batches) < rounds and (spent < budget_s or len(batches) < 2):
            batch = [_timed(call, number, device) for _ in range(samples)]
            spent += sum(batch)
            batches.append([seconds / number for seconds in batch])
        results[entry["id"]] = {
            "batches": batches,
            "number": number,
            "elements": count,
            "bytes": count * 4,
            "measure_s": time.perf_counter() - started,
        }
    return results


def measure(
    entries: list[dict[str, Any]],
    world_size: int,
    backend: str,
    rounds: int,
    samples: int,
    min_sample_s: float,
    budget_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    """Per benchmark id: batches of seconds per op, why it was skipped, or how it failed."""
    import torch

    device = entries[0]["device"] if entries else "cpu"
    if backend.startswith("nccl") and torch.cuda.device_count() < world_size:
        reason = (
            f"{backend} with {world_size} ranks needs {world_size} GPUs, "
            f"{torch.cuda.device_count()} visible; lower world_sizes or use gloo"
        )
        return {entry["id"]: {"skipped": reason} for entry in entries}
    try:
        values = run_ranks(
            BENCH_COLLECTIVES_RANK,
            world_size,
            {
                "entries": entries,
                "rounds": rounds,
                "samples": samples,
                "min_sample_s": min_sample_s,
                "budget_s": budget_s,
            },
            backend=backend,
            timeout_s=timeout_s,
            start="fork" if device == "cpu" and can_fork() else "spawn",
            cpus=unpinned_cpus() or None,
        )
    except RanksFailed as exc:
        status = "timeout" if "timed out" in str(exc) else "crashed"
        failure = {
            "status": status,
            "error": str(exc)[:500],
            "stderr_tail": "\n".join(r["stderr_tail"] for r in exc.ranks)[-1500:],
        }
        return {entry["id"]: {"failed": failure} for entry in entries}
    first = values[0]
    if isinstance(first, dict) and "raised" in first:
        return {
            entry["id"]: {"skipped": f"rank 0 raised {first['raised']}"[:500]} for entry in entries
        }
    return dict(first)
