"""A real multi-node Ray cluster on this machine, for the tests and the benchmarks.

Each node stands for a hardware profile through its ``torchcanary.profile`` label (and a
``profile_<name>`` custom resource). It never listens beyond this machine. Two kinds:

- ``start_local_cluster``: every node bound to 127.0.0.1 (``ray.cluster_utils.Cluster``).
  The nodes share one network stack, so no node has a link of its own to cut.
- ``start_bridged_cluster``: every node, the head too, a ``ray start`` in a network
  namespace of its own, joined to a private bridge by a veth (``drill/netns.py``), so a
  node's link to the others can be cut or slowed as on separate machines. Ray listens on
  every address of a node that is not on loopback; inside a namespace those are its
  loopback and its veth, which only this machine reaches. The driver connects from outside
  the namespaces through the head's Ray client port.

Every loopback node has ``tests/fixtures`` on its ``PYTHONPATH``, so it can run the
fixtures' units (``SMOKE``) and probes. Imports Ray (the 127.0.0.1 kind). The tests find
this module on pytest's ``pythonpath``; a benchmark puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from process_helpers import running
from torchcanary.drill.netns import RankNetwork
from torchcanary.hardware_profile import PROFILE_LABEL

FIXTURES = Path(__file__).parent / "fixtures"
# The smallest real unit (tests/fixtures/fleet_smoke.py), which every loopback node can run.
SMOKE = "fleet_smoke:smoke"
NAMESPACE_PREFIX = "tcray-"
GCS_PORT = 6379  # free in the head's own namespace
# Notice a dead node within seconds, not the default quarter minute.
HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
CLIENT_PORT = 10001
# The head's Ray client server (its proxier) starts a server of its own for each client and
# waits 30 s for it to answer, else refuses the client ("Initialization failure from
# server"). The proxier reads this variable once, at import, from the environment its
# ``ray start`` hands down; past any driver's connect deadline, that deadline decides.
CLIENT_SERVER_WAIT_S = 300
CLIENT_SERVER_WAIT_VARIABLE = "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S"
# What ``ray start --block`` prints once its node has registered with the head.
STARTED_LINE = "Running subprocesses are monitored"


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
    _without_token_auth()
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
            "_system_config": HEALTH_CHECK,
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
    profile: str,
    num_cpus: int = 1,
    env_vars: dict[str, str] | None = None,
    num_gpus: int = 0,
) -> dict[str, Any]:
    """``Cluster.add_node`` arguments for one more loopback node standing for ``profile``.

    ``env_vars`` are set for the node's raylet, so every unit it runs sees them: how a test
    makes one node differ from another on a single machine. ``PYTHONPATH`` is the fixtures
    folder, so the node imports the fixtures' units and probes. ``num_gpus`` is what the
    node declares to Ray (``ray start --num-gpus``), GPUs or not: Ray hands them out and
    sets each holder's CUDA_VISIBLE_DEVICES as for real ones.
    """
    return {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "node_ip_address": "127.0.0.1",
        "labels": {PROFILE_LABEL: profile},
        "resources": {f"profile_{profile}": 1},
        "env_vars": {"PYTHONPATH": str(FIXTURES), **(env_vars or {})},
    }


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
        alive = [pid for pid in alive if running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@dataclass
class BridgedCluster:
    """A Ray cluster whose every node has a network namespace of its own (see above)."""

    network: RankNetwork
    temp_dir: Path
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def address(self) -> str:
        """Where a driver outside the namespaces connects (the head's Ray client port)."""
        return f"ray://{self.network.rank_address(0)}:{CLIENT_PORT}"

    def namespace(self, node: int) -> str:
        """The network namespace of node ``node`` (0 is the head)."""
        return self.network.namespaces[node]

    def stop(self, wait_s: float = 10.0) -> list[int]:
        """Stop every process in the cluster's namespaces, then remove them, their veths
        and the bridge; the pids still alive after that (none).

        SIGTERM first (Ray's processes shut down), SIGKILL after ``wait_s`` for the rest.
        """
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + wait_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        left = self.processes()
        self.network.close()
        subprocess.run(["rm", "-rf", str(self.temp_dir)], check=False)
        return left

    def processes(self) -> list[int]:
        """Every process running in one of the cluster's namespaces."""
        pids = []
        for namespace in self.network.namespaces:
            listed = subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
            ).stdout
            pids += [int(pid) for pid in listed.split()]
        return pids


def _without_token_auth() -> None:
    """The test clusters, and the drivers that join them, run without Ray's token auth.

    Left unset, Ray turns it on by itself once a token exists in ``~/.ray`` (the first
    local cluster writes one), and a node started in a namespace then fails to join:
    what is tested here is torchcanary on a cluster, not Ray's authentication."""
    os.environ["RAY_AUTH_MODE"] = "disabled"


def start_bridged_cluster(
    profiles: Sequence[str], num_cpus: int = 1, timeout_s: float = 90.0
) -> BridgedCluster:
    """A head with no CPU and one node per profile name, each in its own namespace.

    Needs root (namespaces and veths). Returns once every node has joined.
    """
    _without_token_auth()
    token = _token_with_a_free_subnet()
    network = RankNetwork(token, 1 + len(profiles), NAMESPACE_PREFIX, 214).__enter__()
    # Ray's unix sockets must stay under 108 characters, so a short folder of its own.
    cluster = BridgedCluster(network, Path(f"/tmp/tcray-{token[:8]}"))
    head = network.rank_address(0)
    try:
        cluster.nodes.append(
            _ray_start(
                cluster,
                0,
                [
                    "--head",
                    f"--port={GCS_PORT}",
                    f"--ray-client-server-port={CLIENT_PORT}",
                    "--num-cpus=0",
                    "--include-dashboard=false",
                    f"--system-config={json.dumps(HEALTH_CHECK)}",
                    f"--temp-dir={cluster.temp_dir}",
                ],
            )
        )
        _wait_for_nodes(cluster, 1, timeout_s)
        # One node at a time: a raylet that cannot register within Ray's 30 s (a loaded
        # machine, several starting at once) makes its ray start give up.
        for node, profile in enumerate(profiles, start=1):
            args = [
                f"--address={head}:{GCS_PORT}",
                f"--num-cpus={num_cpus}",
                f"--labels={PROFILE_LABEL}={profile}",
                f"--resources={json.dumps({f'profile_{profile}': 1})}",
            ]
            cluster.nodes.append(_ray_start(cluster, node, args))
            _wait_for_nodes(cluster, 1 + node, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _token_with_a_free_subnet() -> str:
    """A token whose subnet (10.214.<first byte>.0/24) no address here is in yet.

    Two bridges with one subnet (another run's cluster, or one a killed run left behind)
    would route the driver's packets to either head.
    """
    taken = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=30
    ).stdout
    for _ in range(1024):
        token = secrets.token_hex(8)
        if f" 10.214.{int(token[:2], 16)}." not in taken:
            return token
    raise RuntimeError("every subnet 10.214.x.0/24 is in use here: remove stale tcb* bridges")


def _ray_start(cluster: BridgedCluster, node: int, args: list[str]) -> subprocess.Popen[bytes]:
    """``ray start --block`` for node ``node`` inside its namespace, in a session of its own."""
    network = cluster.network
    command = [
        *network.prefix(node),
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--block",
        f"--node-ip-address={network.rank_address(node)}",
        "--disable-usage-stats",
        *args,
    ]
    # A node off loopback: Ray's guard against multi-node clusters on macOS must be off.
    env = {
        **os.environ,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        CLIENT_SERVER_WAIT_VARIABLE: str(CLIENT_SERVER_WAIT_S),
    }
    cluster.temp_dir.mkdir(parents=True, exist_ok=True)
    log = open(cluster.temp_dir / f"ray-start-{node}.log", "ab")  # noqa: SIM115 (the child's)
    with log:
        return subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_nodes(cluster: BridgedCluster, count: int, timeout_s: float) -> None:
    """Until the first ``count`` nodes' ``ray start`` say their node has registered."""
    deadline = time.monotonic() + timeout_s
    logs = [cluster.temp_dir / f"ray-start-{node}.log" for node in range(count)]
    while not all(STARTED_LINE in log.read_text(errors="replace") for log in logs):
        exited = [proc for proc in cluster.nodes if proc.poll() is not None]
        if exited or time.monotonic() > deadline:
            tails = [log.read_text(errors="replace")[-400:] for log in logs]
            raise RuntimeError(
                f"the bridged Ray cluster did not start ({len(exited)} ray start exited): {tails}"
            )
        time.sleep(0.3)
