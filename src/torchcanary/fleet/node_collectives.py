"""The bench's collectives across nodes: one rank per Ray node, algbw and busbw per op.

The ranks are the bench's own (``measure/collectives.py:rank_main``, through
``worker/rank_main``), started by a :class:`~torchcanary.fleet.rank_host.RankHost` on each
of N nodes of a STRICT_SPREAD placement group, the group's address at node 0. Each figure is
the median time per operation of the slowest rank, and the bandwidths follow nccl-tests
(``doc/PERFORMANCE.md`` in NVIDIA/nccl-tests): algbw = bytes / time, busbw = algbw times
2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for
broadcast (``measure.specs.busbw_factor``), so figures compare across node counts.

gloo over TCP is what runs here (the local cluster's nodes share 127.0.0.1: loopback, not a
wire). ``backend="nccl"`` with ``device="cuda"`` takes each node's first GPU (LOCAL_RANK 0):
not checked: no GPU node in the test cluster. nccl2 would come the same way once the
candidate offers it as a backend name: not checked either.
"""

from __future__ import annotations

import secrets
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from torchcanary.fleet.rank_host import RankHost
from torchcanary.measure.specs import busbw_factor
from torchcanary.worker.calls import BENCH_COLLECTIVES_RANK

if TYPE_CHECKING:
    from torchcanary.fleet.ray_executor import RayExecutor

DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
DEFAULT_SIZES = (2**16, 2**20, 2**23)


@dataclass(frozen=True)
class NodeCollective:
    """One op and size across ``nodes`` nodes; ``skipped`` says why there is no figure."""

    op: str
    bytes: int
    backend: str
    nodes: int
    seconds: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    skipped: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def collectives_across_nodes(
    executor: RayExecutor,
    plan_json: Mapping[str, Any],
    role: str,
    nodes: int,
    ops: Sequence[str] = DEFAULT_OPS,
    sizes: Sequence[int] = DEFAULT_SIZES,
    backend: str = "gloo",
    budget_s: float = 1.0,
    timeout_s: float = 300.0,
) -> list[NodeCollective]:
    """Every op at every size, with one rank of ``role``'s environment on each node."""
    group = executor.spread(RankHost, nodes, [secrets.token_hex(8)])
    try:
        group.call_all("prepare", dict(plan_json), role)
        master = (group.places[0].address or "127.0.0.1", int(group.call(0, "free_port")))
        device = "cuda" if backend.startswith("nccl") else "cpu"
        entries = [
            {"id": f"{op}:{size}", "op": op, "bytes": size, "device": device, "backend": backend}
            for op in ops
            for size in sizes
        ]
        call = {
            "target": BENCH_COLLECTIVES_RANK,
            "kwargs": {
                "entries": entries,
                "rounds": 3,
                "samples": 5,
                "min_sample_s": 0.01,
                "budget_s": budget_s,
            },
            "backend": backend,
            "timeout_s": timeout_s,
        }
        answers = group.call_each(
            "collective_rank", [(rank, nodes, master, call) for rank in range(nodes)]
        )
    finally:
        group.close()
    first = answers[0] if answers and isinstance(answers[0], dict) else {"failed": "node 0 gone"}
    return [_figure(entry, nodes, backend, first) for entry in entries]


def _figure(
    entry: Mapping[str, Any], nodes: int, backend: str, answer: Mapping[str, Any]
) -> NodeCollective:
    base = NodeCollective(entry["op"], int(entry["bytes"]), backend, nodes)
    why = answer.get("failed") or answer.get("raised")
    measured = answer.get(entry["id"]) if not why else None
    if not isinstance(measured, Mapping) or "batches" not in measured:
        reason = why or (measured or {}).get("skipped") or "no answer"
        return NodeCollective(**{**base.to_json(), "skipped": str(reason)[:500]})
    seconds = statistics.median(s for batch in measured["batches"] for s in batch)
    size = int(measured["bytes"])
    algbw = size / seconds / 1e9
    return NodeCollective(
        entry["op"],
        size,
        backend,
        nodes,
        seconds,
        algbw,
        algbw * busbw_factor(entry["op"], nodes),
    )
