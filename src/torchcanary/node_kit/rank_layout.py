"""Where the ranks of work across nodes sit: one per GPU on GPU nodes, one per CPU node.

A job across GPU nodes runs as production jobs do: every GPU of each node holds a rank
(torchrun's ``--nproc-per-node`` = the node's GPUs), so NCCL carries the traffic between
a node's own GPUs over NVLink and between nodes over the fabric, the picture a
qualification must see. On CPU nodes one rank per node is the work (more would only share
the node's cores). Ranks are numbered node by node: node ``n``'s local rank ``l`` is global
rank ``n * per_node + l``, and each rank takes GPU ``l`` of the devices its host job was
given (every rank of a node sees all of them, so NCCL can use the links between them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# What binds a rank's traffic to the network device that reaches the other nodes.
_SOCKET_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class RankLayout:
    """``per_node`` ranks on each of ``nodes`` nodes; ``on_gpus``: each on its own GPU."""

    nodes: int
    per_node: int = 1
    on_gpus: bool = False

    @property
    def world(self) -> int:
        return self.nodes * self.per_node

    def ranks(self, node: int) -> list[tuple[int, int]]:
        """Node ``node``'s ranks as (global rank, local rank)."""
        return [(node * self.per_node + local, local) for local in range(self.per_node)]


def rank_layout(nodes: int, gpus_each: int, gpu_nodes: bool) -> RankLayout:
    """One rank per GPU when every node of the work has GPUs (``gpu_nodes``, from their
    hardware facts) and each host holds ``gpus_each`` of them; else one rank per node."""
    on_gpus = gpu_nodes and gpus_each > 0
    return RankLayout(nodes, gpus_each if on_gpus else 1, on_gpus)


def rank_env(
    layout: RankLayout,
    node: int,
    local: int,
    master: tuple[str, int],
    interface: str = "",
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables of one rank of a group (``torch.distributed``'s env:// init), the
    group's address at ``master``; ``interface``: the network device that reaches the
    other nodes, which gloo and NCCL bind to unless the site set its own in ``environ``
    (the host's environment)."""
    env = {
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
        "RANK": str(node * layout.per_node + local),
        "WORLD_SIZE": str(layout.world),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(layout.per_node),
    }
    given = os.environ if environ is None else environ
    if interface:
        env.update({name: interface for name in _SOCKET_VARIABLES if name not in given})
    return env
