"""A real multi-node Ray cluster on this machine, bound to 127.0.0.1, for tests and figures.

Each node stands for a hardware profile through its ``torchcanary.profile`` label (and a
``profile_<name>`` custom resource). It never listens beyond localhost: torchcanary does
not start a cluster others can reach. Imports Ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchcanary.fleet.profile import PROFILE_LABEL


def start_local_cluster(
    profiles: Sequence[str],
    num_cpus: int = 1,
    client_port: int | None = None,
    head_cpus: int | None = None,
) -> Any:
    """A ``ray.cluster_utils.Cluster`` with one node per profile name (the first is the head).

    With ``client_port`` the head also serves Ray clients (``ray://127.0.0.1:PORT``).
    ``head_cpus=0`` keeps work off the head, so a drill may kill any node that holds work
    without ending the cluster.
    """
    # Ray turns 127.0.0.1 into the machine's outward address unless told to stay local.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False
    head, *workers = profiles
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **local_node_args(head, num_cpus if head_cpus is None else head_cpus),
            "include_dashboard": False,
            # Notice a dead node within seconds, not the default quarter minute.
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5},
            **({"ray_client_server_port": client_port} if client_port else {}),
        },
    )
    try:
        for profile in workers:
            cluster.add_node(**local_node_args(profile, num_cpus))
        cluster.wait_for_nodes()
    except BaseException:
        stop_local_cluster(cluster)
        raise
    return cluster


def local_node_args(
    profile: str, num_cpus: int = 1, env_vars: dict[str, str] | None = None
) -> dict[str, Any]:
    """``Cluster.add_node`` arguments for one more loopback node standing for ``profile``.

    ``env_vars`` are set for the node's raylet, so every unit it runs sees them: how a test
    makes one node differ from another on a single machine.
    """
    args: dict[str, Any] = {
        "num_cpus": num_cpus,
        "node_ip_address": "127.0.0.1",
        "labels": {PROFILE_LABEL: profile},
        "resources": {f"profile_{profile}": 1},
    }
    if env_vars:
        args["env_vars"] = dict(env_vars)
    return args


def node_pids(node: Any) -> list[int]:
    """Every process Ray started for one node (raylet, GCS, workers' parents, ...)."""
    return [info.process.pid for infos in node.all_processes.values() for info in infos]


def stop_local_cluster(cluster: Any, wait_s: float = 20.0) -> list[int]:
    """Shut every node down; the pids of Ray processes still alive after ``wait_s`` (none)."""
    nodes = [node for node in [cluster.head_node, *cluster.worker_nodes] if node is not None]
    started = [pid for node in nodes for pid in node_pids(node)]
    cluster.shutdown()
    return wait_gone(started, wait_s)


def wait_gone(pids: Sequence[int], wait_s: float = 20.0) -> list[int]:
    """The pids still running (not zombies) after up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    alive = list(pids)
    while True:
        alive = [pid for pid in alive if _running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1]
    except (OSError, IndexError):
        return False
    return not state.startswith("Z")
