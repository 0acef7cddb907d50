"""The bench's collectives across nodes: one rank per Ray node, algbw and busbw per op.

The ranks are the bench's own (``measure/collectives.py:rank_main``, through
``worker/rank_main``), started by a :class:`~torchcanary.fleet.rank_host.RankHost` on each
of N nodes of a STRICT_SPREAD placement group, the group's address at node 0
(:class:`NodeRanks`). Each figure is the median time per operation of the slowest rank, and
the bandwidths follow nccl-tests (``doc/PERFORMANCE.md`` in NVIDIA/nccl-tests): algbw =
bytes / time, busbw = algbw times 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and all_to_all, 1 for broadcast (``measure.specs.busbw_factor``), so figures
compare across node counts. ``bench --fleet --nodes`` (``fleet/node_bench.py``) judges the
same measurements baseline against candidate.

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

from torchcanary.context import ROLES
from torchcanary.fleet.rank_host import RankHost
from torchcanary.measure.specs import busbw_factor
from torchcanary.worker.calls import BENCH_COLLECTIVES_RANK

if TYPE_CHECKING:
    from torchcanary.fleet.ray_executor import RayExecutor, SpreadPlace

DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
DEFAULT_SIZES = (2**16, 2**20, 2**23)


@dataclass(frozen=True)
class RankSchedule:
    """How long one set of ranks measures each entry (``measure/collectives.py:rank_main``)."""

    rounds: int = 3
    samples: int = 5
    min_sample_s: float = 0.01
    budget_s: float = 1.0
    timeout_s: float = 300.0


class NodeRanks:
    """One rank per node on ``nodes`` distinct nodes, every environment of the plan ready.

    Each :meth:`measure` starts a fresh set of ranks in one role's environment, so a
    bench can alternate baseline and candidate on the same nodes. ``close`` ends them all.
    """

    def __init__(self, executor: RayExecutor, plan_json: Mapping[str, Any], nodes: int) -> None:
        self.nodes = nodes
        self._group = executor.spread(RankHost, nodes, [secrets.token_hex(8)])
        try:
            self._group.call_all("prepare", dict(plan_json), ROLES[0])
        except BaseException:
            self._group.close()
            raise

    @property
    def places(self) -> list[SpreadPlace]:
        return list(self._group.places)

    def measure(
        self,
        role: str,
        entries: Sequence[Mapping[str, Any]],
        backend: str,
        schedule: RankSchedule,
    ) -> dict[str, Any]:
        """Per entry id: ``{batches, number, bytes, measure_s}``, ``skipped`` or ``failed``."""
        master = (self._group.places[0].address or "127.0.0.1", self._group.call(0, "free_port"))
        call = {
            "target": BENCH_COLLECTIVES_RANK,
            "kwargs": {
                "entries": [dict(entry) for entry in entries],
                "rounds": schedule.rounds,
                "samples": schedule.samples,
                "min_sample_s": schedule.min_sample_s,
                "budget_s": schedule.budget_s,
            },
            "backend": backend,
            "timeout_s": schedule.timeout_s,
        }
        answers = self._group.call_each(
            "collective_rank",
            [(rank, self.nodes, master, call, role) for rank in range(self.nodes)],
            timeout_s=schedule.timeout_s + 60,
        )
        broken = _broken(answers)
        if broken is not None:
            return {entry["id"]: {"failed": broken} for entry in entries}
        return dict(answers[0])

    def close(self) -> None:
        self._group.close()


def _broken(answers: Sequence[Any]) -> dict[str, str] | None:
    """A failure as the local collectives report one, or None when rank 0 answered."""
    for rank, answer in enumerate(answers):
        why = "node gone" if answer is None else answer.get("failed") or answer.get("raised")
        if why:
            status = "timeout" if "timed out" in str(why) else "crashed"
            return {"status": status, "error": f"rank {rank}: {why}"[:500], "stderr_tail": ""}
    return None


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
    device = "cuda" if backend.startswith("nccl") else "cpu"
    entries: list[dict[str, Any]] = [
        {"id": f"{op}:{size}", "op": op, "bytes": size, "device": device, "backend": backend}
        for op in ops
        for size in sizes
    ]
    ranks = NodeRanks(executor, plan_json, nodes)
    try:
        answer = ranks.measure(
            role, entries, backend, RankSchedule(budget_s=budget_s, timeout_s=timeout_s)
        )
    finally:
        ranks.close()
    return [_figure(entry, nodes, backend, answer.get(entry["id"])) for entry in entries]


def _figure(entry: Mapping[str, Any], nodes: int, backend: str, measured: Any) -> NodeCollective:
    base = NodeCollective(entry["op"], int(entry["bytes"]), backend, nodes)
    if not isinstance(measured, Mapping) or "batches" not in measured:
        refused: dict[str, Any] = dict(measured or {})
        reason = refused.get("skipped") or (refused.get("failed") or {}).get("error")
        return NodeCollective(**{**base.to_json(), "skipped": str(reason or "no answer")[:500]})
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
