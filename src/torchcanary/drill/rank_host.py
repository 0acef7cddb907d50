"""One node's share of a multi-node drill: its environment, its torchrun, its faults.

Runs on a fleet node inside a Ray actor that a STRICT_SPREAD placement group put there
(``drill/node_drill.py`` drives it from the driver). It builds or reuses the plan's
environment in the node's own cache, starts one torchrun for this node (one rank), hosts
the rendezvous store when asked, hands its job events to the driver, and strikes the faults
that must happen on this node: killing its rank, hanging it, killing the whole node, or
cutting or slowing its link to the other nodes (``fleet/node_link.py``).

Every fault is checked before it is tried: one this node cannot strike comes back as a
reason ("needs root", ...), never as a half-done fault. Every process started here carries
the drill's token, and ``close`` kills them; a watchdog does the same if the driver stops
polling, so a driver that dies leaves nothing running on the node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.launch import Area, Launcher
from torchcanary.drill.procs import ProcessSet
from torchcanary.fleet.devices import unit_view
from torchcanary.fleet.node_daemon import daemon_owner, node_daemon
from torchcanary.fleet.node_link import (
    HeldChange,
    device_holding,
    is_loopback,
    network_identity,
)
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.runner import import_root, prepare_environments
from torchcanary.worker.calls import RANK_MAIN
from torchcanary.worker.drill.events import read_events

# A test (or an operator) can make a node act as if it had no privileges, to see the
# "needs root" path on a machine where everything runs as root.
UNPRIVILEGED_VARIABLE = "TORCHCANARY_NODE_UNPRIVILEGED"
ORPHAN_AFTER_S = 120.0


def node_privileges() -> dict[str, Any]:
    """What this node lets a drill do: root, the tools the link faults use, and which
    network stack it is in (nodes in the same one share every link)."""
    pretend = os.environ.get(UNPRIVILEGED_VARIABLE) == "1"
    return {
        "root": os.geteuid() == 0 and not pretend,
        "ip": shutil.which("ip") is not None,
        "tc": shutil.which("tc") is not None,
        "network": network_identity(),
    }


def node_token(token: str, index: int) -> str:
    """The token that tags the drill's processes on node ``index``."""
    return f"{token}-node{index}"


def why_not_strikable(fault: str, privileges: Mapping[str, Any], shared_network: bool) -> str:
    """Why this node cannot strike ``fault`` ('' when it can), checked before the drill.

    ``shared_network``: another node of the drill is in this node's network stack.
    """
    if fault in ("net-down", "net-slow"):
        if not privileges["root"]:
            return "needs root (ip route / tc change the node's network)"
        tool = "ip" if fault == "net-down" else "tc"
        if not privileges[tool]:
            return f"needs the '{tool}' command (iproute2), which is not installed"
        if shared_network:
            return (
                "no network namespace of its own: it shares its links with another node "
                "of the drill (e.g. nodes on 127.0.0.1), so a cut or a rate limit would "
                "hit them and Ray too"
            )
    if fault == "node-kill" and not privileges["root"] and daemon_owner() != os.geteuid():
        return "needs root (the node's Ray or Slurm daemon belongs to another user)"
    return ""


class RankHost:
    """The drill's processes on this node (made a Ray actor by ``ray_executor.spread``)."""

    def __init__(self, index: int, token: str) -> None:
        self.index = index
        self.root = Path(tempfile.mkdtemp(prefix=f"torchcanary-drill-{token}-{index}-"))
        self.area = Area(self.root)
        self.token = token
        # Its own token per node: on a cluster on one machine, a node that dies must take
        # only its own processes with it.
        self.procs = ProcessSet(self.area.logs, token=node_token(token, index))
        self.python = ""
        self.pythons: dict[str, str] = {}  # every environment of the plan, by role
        self.import_root = self.root
        self.torchrun: subprocess.Popen[bytes] | None = None
        self.store: subprocess.Popen[bytes] | None = None
        self.checkpoints = str(self.area.checkpoints)
        self.address = ""
        self.peers: list[str] = []
        self.net_rate = "20mbit"
        self.link_hold_s = 60.0
        self.link: HeldChange | None = None
        self._last_poll = time.monotonic()
        self._measuring = False  # a collective_rank call is running: the driver waits on it
        self._closed = threading.Event()
        threading.Thread(target=self._watchdog, daemon=True).start()

    # setting up ----------------------------------------------------------------------
    def prepare(self, plan_json: Mapping[str, Any], role: str) -> dict[str, Any]:
        """The role's environment here (built in this node's cache if missing); node facts."""
        plan = RunPlan.from_json(dict(plan_json))
        environments = prepare_environments(plan, Progress(quiet=True))
        self.pythons = {name: environment.python for name, environment in environments.items()}
        self.python = self.pythons[role]
        self.import_root = import_root(plan, self.root)
        return {
            "index": self.index,
            "host": socket.gethostname(),
            "privileges": node_privileges(),
            "raylet_pid": os.getppid(),
            "devices": unit_view(),  # what the engine gave this host (its GPUs)
        }

    def reset(self, area_name: str, checkpoints: str) -> None:
        """A fresh scratch folder for the next job; the previous one's processes are gone.

        ``checkpoints`` is the folder every node's rank saves to and restores from: it
        must be one that all nodes see (shared storage), or a restart finds the ranks
        resuming from different steps.
        """
        self.procs.kill_all()
        self._lift_link()
        self.area = Area(self.root / area_name)
        self.checkpoints = checkpoints
        self.procs = ProcessSet(self.area.logs, token=self.procs.token)
        self.torchrun = self.store = None

    def start_store(self, spec_json: Mapping[str, Any], address: str) -> str:
        """Host the rendezvous store on this node; its ``host:port``."""
        self.store, endpoint = self._launcher(spec_json).store_host(address)
        return endpoint

    def start_rank(
        self,
        spec_json: Mapping[str, Any],
        endpoint: str,
        nodes: int,
        max_restarts: int,
        min_nodes: int | None = None,
    ) -> int:
        """This node's torchrun (one rank), rendezvousing with the others at ``endpoint``;
        elastic down to ``min_nodes`` when given."""
        launcher = self._launcher(spec_json)
        command = [
            *launcher.torchrun_node(nodes, 1, endpoint, self.token, max_restarts, min_nodes),
            *_with_checkpoints(launcher.job_args("exit"), self.checkpoints),
        ]
        env = launcher.base_env()
        env["TORCHCANARY_NODE"] = str(self.index)
        if self.address and not is_loopback(self.address):
            # Bind gloo and the agent to the address the other nodes reach this one at,
            # not to whatever the host name resolves to.
            at = command.index("--rdzv-endpoint")
            command[at:at] = ["--local-addr", self.address]
            if "GLOO_SOCKET_IFNAME" not in os.environ:
                env["GLOO_SOCKET_IFNAME"] = device_holding(self.address)
        self.torchrun = self.procs.start(f"torchrun-node{self.index}", command, env)
        return self.torchrun.pid

    def _launcher(self, spec_json: Mapping[str, Any]) -> Launcher:
        return Launcher(
            self.python, self.import_root, DrillSpec(**spec_json), self.area, self.procs
        )

    # watching ------------------------------------------------------------------------
    def poll(self) -> dict[str, Any]:
        """The job's events so far and whether this node's torchrun still runs."""
        self._last_poll = time.monotonic()
        code = None if self.torchrun is None else self.torchrun.poll()
        return {"events": read_events(self.area.events), "exit_code": code, "t": time.time()}

    def log_tail(self, limit: int = 1500) -> str:
        return self.procs.log_tail(f"torchrun-node{self.index}", limit)

    # faults ----------------------------------------------------------------------------
    def strike(self, fault: str, pid: int) -> dict[str, Any]:
        """Strike ``fault`` here; when (this node's clock) and what was done."""
        if fault == "kill":
            os.kill(pid, signal.SIGKILL)
            detail = f"SIGKILL to the rank on node {self.index} (pid {pid})"
        elif fault == "hang":
            os.kill(pid, signal.SIGSTOP)
            detail = f"SIGSTOP to the rank on node {self.index} (pid {pid})"
        elif fault == "node-kill":
            return self._kill_node()
        elif fault in ("net-down", "net-slow"):
            return self._cut_or_slow(fault)
        else:
            raise ValueError(f"{fault} is not struck by a node's host")
        return {"t": time.time(), "detail": detail}

    def set_network(self, address: str, peers: list[str], net_rate: str, hold_s: float) -> None:
        """This node's address, the other nodes', the rate limit, and how long a link
        fault may last at most: what a network fault acts on."""
        self.address = address
        self.peers = [peer for peer in peers if peer]
        self.net_rate = net_rate
        self.link_hold_s = hold_s

    def _cut_or_slow(self, fault: str) -> dict[str, Any]:
        """Cut or slow this node's link to its peers; undone here after ``link_hold_s``
        even if the driver never comes back (``node_link.HeldChange``)."""
        self._lift_link()
        self.link = HeldChange.make(fault, self.peers, self.net_rate, self.link_hold_s)
        return {"t": time.time(), "detail": f"node {self.index}: {self.link.detail}"}

    def _lift_link(self) -> None:
        if self.link is not None:
            self.link.lift()
            self.link = None

    def release(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def _kill_node(self) -> dict[str, Any]:
        """The whole node dies at once: every drill process here, then the engine's daemon
        (``fleet/node_daemon.py``: Ray's raylet, this process's parent; Slurm's slurmd and
        the job's step daemons), then this host; the node is dead to the cluster."""
        struck_t = time.time()
        doomed, what = node_daemon()
        self.procs.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)  # this host dies before its close()
        detail = f"node {self.index} killed: its drill processes and {what}"
        # The reply must leave before the daemon (and with it this host) goes.
        threading.Timer(0.2, _kill_all, ([*doomed, os.getpid()],)).start()
        return {"t": struck_t, "detail": detail}

    # collectives across nodes ----------------------------------------------------------
    def free_port(self) -> int:
        """A port free on this node, for the group's rendezvous (node 0 hosts it)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def collective_rank(
        self,
        rank: int,
        world: int,
        master: tuple[str, int],
        call: Mapping[str, Any],
        role: str,
        address: str = "",
    ) -> dict[str, Any]:
        """One rank of a group spread over the nodes, in ``role``'s environment; its answer.

        ``call`` holds the worker ``target``, its ``kwargs``, the ``backend`` and
        ``timeout_s``; the rank is ``torchcanary.worker.rank_main``, as on one machine, with
        the group's address pointing at node 0 instead of loopback. ``address`` is this
        node's as the others reach it: off loopback, gloo binds to its interface (as a
        drill's ranks do) rather than to whatever the host name resolves to.
        """
        out = self.root / f"collective-rank{rank}.json"
        out.unlink(missing_ok=True)
        env = {
            "PYTHONPATH": str(self.import_root),
            "MASTER_ADDR": master[0],
            "MASTER_PORT": str(master[1]),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": "0",  # one rank per node
            "TORCHCANARY_PARENT_PID": str(os.getpid()),
        }
        if address and not is_loopback(address) and "GLOO_SOCKET_IFNAME" not in os.environ:
            env["GLOO_SOCKET_IFNAME"] = device_holding(address)
        spec = json.dumps({**dict(call), "out": str(out)})
        command = [self.pythons[role], "-m", RANK_MAIN, spec]
        self._measuring = True
        try:
            return self._run_rank(rank, out, command, env, float(call["timeout_s"]))
        finally:
            self._measuring = False
            self._last_poll = time.monotonic()

    def _run_rank(
        self, rank: int, out: Path, command: list[str], env: dict[str, str], timeout_s: float
    ) -> dict[str, Any]:
        proc = self.procs.start(f"collective-rank{rank}", command, env)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.procs.kill_all()
            return {"failed": f"rank {rank} timed out after {timeout_s} s"}
        if proc.returncode != 0 or not out.exists():
            tail = self.procs.log_tail(f"collective-rank{rank}", 800)
            return {"failed": f"rank {rank} exited {proc.returncode}: {tail}"}
        return dict(json.loads(out.read_text())["value"])

    # cleaning up -----------------------------------------------------------------------
    def close(self) -> list[int]:
        """Kill every process of the drill on this node; the pids that had to be killed."""
        self._closed.set()
        killed = self.procs.kill_all()
        self._lift_link()
        shutil.rmtree(self.root, ignore_errors=True)
        return killed

    def _watchdog(self) -> None:
        while not self._closed.wait(5.0):
            # A call in progress ends by its own timeout; the driver is counted gone after.
            if not self._measuring and time.monotonic() - self._last_poll > ORPHAN_AFTER_S:
                self.close()  # the driver is gone: leave nothing running


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _with_checkpoints(job_args: list[str], checkpoints: str) -> list[str]:
    """The job's arguments with its checkpoint folder replaced by the shared one."""
    at = job_args.index("--ckpt-dir") + 1
    return [*job_args[:at], checkpoints, *job_args[at + 1 :]]
