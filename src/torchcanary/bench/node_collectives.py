"""The bench's collective ranks across nodes: one rank per node's GPU (one per CPU node),
fresh for each call.

The ranks are the bench's own (``worker/bench/collectives.py:rank_main``, through
``worker/rank_main``), started by a :class:`~torchcanary.node_kit.rank_host.RankHost` on each
of N nodes of a STRICT_SPREAD placement group, the group's address at node 0. Each answer
is what the local collectives return (batches of the slowest rank's seconds per op, or why
an op skipped or failed), so ``bench --fleet --nodes`` (``bench/across_nodes.py``) judges
them and derives algbw and busbw exactly as it does for ranks on one machine.

gloo over TCP is what runs here (the local cluster's nodes share 127.0.0.1: loopback, not a
wire). On GPU nodes ``nccl`` and ``nccl2`` with ``device="cuda"`` run one rank on each GPU
of every node (``node_kit/rank_layout.py``: NVLink within a node, the fabric across): its
command lines and rank numbers are tested, the collectives themselves are not checked here
(no GPU).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchcanary.context import ROLES
from torchcanary.node_kit.rank_host import RankHost
from torchcanary.node_kit.rank_layout import RankLayout
from torchcanary.worker.calls import BENCH_COLLECTIVES_RANK

if TYPE_CHECKING:
    from torchcanary.node_kit.host_group import HostPlace, NodeFleet


@dataclass(frozen=True)
class RankSchedule:
    """How long one set of ranks measures each entry (``worker/bench/collectives.py:rank_main``)."""

    rounds: int = 3
    samples: int = 5
    min_sample_s: float = 0.01
    budget_s: float = 1.0
    timeout_s: float = 300.0


class NodeRanks:
    """One rank host on each of ``nodes`` distinct nodes, holding ``gpus`` GPUs each.

    :meth:`prepare` readies every environment of the plan (placed first, so the caller can
    refuse the placement before anything is built). Each :meth:`measure` starts a fresh
    set of ranks in one role's environment, so a bench can alternate baseline and
    candidate on the same nodes. ``close`` ends them all.
    """

    def __init__(self, executor: NodeFleet, nodes: int, gpus: int = 0) -> None:
        self.nodes = nodes
        self._group = executor.spread(RankHost, nodes, [secrets.token_hex(8)], gpus=gpus)
        self.facts: list[dict[str, Any]] = []

    def prepare(self, plan_json: Mapping[str, Any]) -> None:
        """Every environment of the plan on every node; each host's facts, with what its
        engine gave it (``devices``), kept in ``facts``."""
        self.facts = self._group.call_all("prepare", dict(plan_json), ROLES[0])

    @property
    def places(self) -> list[HostPlace]:
        return list(self._group.places)

    def measure(
        self,
        role: str,
        entries: Sequence[Mapping[str, Any]],
        backend: str,
        schedule: RankSchedule,
        layout: RankLayout,
    ) -> dict[str, Any]:
        """Per entry id: ``{batches, number, bytes, measure_s}``, ``skipped`` or ``failed``;
        ``layout``: how many ranks each node runs (one per GPU on GPU nodes)."""
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
        addresses = [place.address or "" for place in self._group.places]
        answers = self._group.call_each(
            "collective_rank",
            [
                (node, layout.per_node, layout.world, master, call, role, addresses[node])
                for node in range(self.nodes)
            ],
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
