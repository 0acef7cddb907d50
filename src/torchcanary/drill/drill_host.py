"""One node's share of a multi-node drill: its torchrun, its store, its faults.

The host the fleet places on each node (``node_kit/rank_host.py``: the node's environments
and cleanup), with what a drill adds (``drill/node_drill.py`` drives it from the driver):
it starts one torchrun for this node (one rank, or one per GPU on a GPU node), hosts the
rendezvous store when asked, hands its job events to the driver, and strikes the faults
that must happen on this node: killing its rank, hanging it, killing the whole node, or
cutting or slowing its link to the other nodes (``node_kit/node_link.py``).

Every fault is checked before it is tried: one this node cannot strike comes back as a
reason ("needs root", ...), never as a half-done fault.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.launch import Area, Launcher
from torchcanary.node_kit.node_daemon import daemon_owner, node_daemon
from torchcanary.node_kit.node_link import HeldChange, device_holding, is_loopback
from torchcanary.node_kit.rank_host import RankHost
from torchcanary.process_set import ProcessSet
from torchcanary.worker.drill.events import read_events


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


class DrillHost(RankHost):
    """The drill's processes on this node (made a Ray actor by ``ray_executor.spread``)."""

    def __init__(self, index: int, token: str) -> None:
        super().__init__(index, token)
        self.area = Area(self.root)
        self.torchrun: subprocess.Popen[bytes] | None = None
        self.store: subprocess.Popen[bytes] | None = None
        self.checkpoints = str(self.area.checkpoints)
        self.address = ""
        self.peers: list[str] = []
        self.net_rate = "20mbit"
        self.link_hold_s = 60.0
        self.link: HeldChange | None = None

    # setting up ----------------------------------------------------------------------
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
        per_node: int = 1,
        on_gpus: bool = False,
    ) -> int:
        """This node's torchrun, rendezvousing with the others at ``endpoint``: ``per_node``
        ranks (one per GPU of a GPU node, on nccl: ``node_kit/rank_layout.py``); elastic
        down to ``min_nodes`` when given."""
        command, env = self.rank_command(
            self._launcher(spec_json), endpoint, nodes, max_restarts, min_nodes, per_node, on_gpus
        )
        self.torchrun = self.procs.start(f"torchrun-node{self.index}", command, env)
        return self.torchrun.pid

    def rank_command(
        self,
        launcher: Launcher,
        endpoint: str,
        nodes: int,
        max_restarts: int,
        min_nodes: int | None,
        per_node: int,
        on_gpus: bool,
    ) -> tuple[list[str], dict[str, str]]:
        """The torchrun line and its variables for this node's ranks."""
        command = [
            *launcher.torchrun_node(nodes, per_node, endpoint, self.token, max_restarts, min_nodes),
            *_with_checkpoints(launcher.job_args("exit"), self.checkpoints),
        ]
        if on_gpus:
            command += ["--backend", "nccl"]  # each rank on its GPU (LOCAL_RANK)
        env = launcher.base_env()
        env["TORCHCANARY_NODE"] = str(self.index)
        if self.address and not is_loopback(self.address):
            # Bind the agent, gloo and NCCL to the address the other nodes reach this one
            # at, not to whatever the host name resolves to.
            at = command.index("--rdzv-endpoint")
            command[at:at] = ["--local-addr", self.address]
            for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
                if name not in os.environ:
                    env[name] = device_holding(self.address)
        return command, env

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
        (``node_kit/node_daemon.py``: Ray's raylet, this process's parent; Slurm's slurmd and
        the job's step daemons), then this host; the node is dead to the cluster."""
        struck_t = time.time()
        doomed, what = node_daemon()
        self.procs.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)  # this host dies before its close()
        detail = f"node {self.index} killed: its drill processes and {what}"
        # The reply must leave before the daemon (and with it this host) goes.
        threading.Timer(0.2, _kill_all, ([*doomed, os.getpid()],)).start()
        return {"t": struck_t, "detail": detail}

    # cleaning up -----------------------------------------------------------------------
    def close(self) -> list[int]:
        """Kill every process of the drill on this node, and lift a link fault still held;
        the pids that had to be killed."""
        self._lift_link()
        return super().close()


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _with_checkpoints(job_args: list[str], checkpoints: str) -> list[str]:
    """The job's arguments with its checkpoint folder replaced by the shared one."""
    at = job_args.index("--ckpt-dir") + 1
    return [*job_args[:at], checkpoints, *job_args[at + 1 :]]
