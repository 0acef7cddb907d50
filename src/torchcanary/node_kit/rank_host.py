"""One node's host for work spread over N nodes: its environments, its ranks, its cleanup.

Runs on a fleet node inside a host the executor placed there (``executor.spread``: a Ray
actor in a STRICT_SPREAD placement group, or a Slurm task). It builds or reuses the plan's
environments in the node's own cache and runs its ranks of a group spread over the nodes
(``collective_rank``: the bench's collectives across nodes; one rank per GPU on GPU nodes,
``rank_layout.py``). A drill's host
(``drill/drill_host.py``) adds its torchrun, its store and the faults it strikes.

Every process started here carries the host's token, and ``close`` kills them; a watchdog
does the same if the driver stops calling, so a driver that dies leaves nothing running on
the node.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchcanary.envs.prepare import prepare_environments
from torchcanary.envs.worker_process import import_root_for
from torchcanary.node_kit.devices import unit_view
from torchcanary.node_kit.node_link import device_holding, is_loopback, network_identity
from torchcanary.node_kit.rank_layout import RankLayout, rank_env
from torchcanary.plan import RunPlan
from torchcanary.process_set import ProcessSet
from torchcanary.progress import Progress
from torchcanary.worker.calls import RANK_MAIN

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


class RankHost:
    """The processes of one node's share of the work (made a Ray actor by
    ``ray_executor.spread``, a Slurm task by ``slurm_hosts``)."""

    def __init__(self, index: int, token: str) -> None:
        self.index = index
        self.root = Path(tempfile.mkdtemp(prefix=f"torchcanary-drill-{token}-{index}-"))
        self.token = token
        # Its own token per node: on a cluster on one machine, a node that dies must take
        # only its own processes with it.
        self.procs = ProcessSet(self.root / "logs", token=node_token(token, index))
        self.python = ""
        self.pythons: dict[str, str] = {}  # every environment of the plan, by role
        self.import_root = self.root
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
        # Work across nodes is a plan of the bench or the drill alone, whose workers import
        # torchcanary only (no probe modules of the claims').
        self.import_root = import_root_for(("torchcanary",), self.root / "import-root")
        return {
            "index": self.index,
            "host": socket.gethostname(),
            "privileges": node_privileges(),
            "raylet_pid": os.getppid(),
            "devices": unit_view(),  # what the engine gave this host (its GPUs)
        }

    # collectives across nodes ----------------------------------------------------------
    def free_port(self) -> int:
        """A port free on this node, for the group's rendezvous (node 0 hosts it)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def collective_rank(
        self,
        node: int,
        per_node: int,
        world: int,
        master: tuple[str, int],
        call: Mapping[str, Any],
        role: str,
        address: str = "",
    ) -> dict[str, Any]:
        """This node's ``per_node`` ranks of a group of ``world`` spread over the nodes
        (``rank_layout.py``: one per GPU on GPU nodes), in ``role``'s environment; the
        answer of its first rank, or the first failure among them.

        ``call`` holds the worker ``target``, its ``kwargs``, the ``backend`` and
        ``timeout_s``; each rank is ``torchcanary.worker.rank_main``, as on one machine,
        with the group's address pointing at node 0 instead of loopback. ``address`` is
        this node's as the others reach it: off loopback, gloo and NCCL bind to its
        interface (as a drill's ranks do) rather than to whatever the host name resolves to.
        """
        layout = RankLayout(world // per_node, per_node)
        interface = device_holding(address) if address and not is_loopback(address) else ""
        started = []
        for rank, local in layout.ranks(node):
            out = self.root / f"collective-rank{rank}.json"
            out.unlink(missing_ok=True)
            env = {
                "PYTHONPATH": str(self.import_root),
                "TORCHCANARY_PARENT_PID": str(os.getpid()),
                **rank_env(layout, node, local, master, interface),
            }
            spec = json.dumps({**dict(call), "out": str(out)})
            command = [self.pythons[role], "-m", RANK_MAIN, spec]
            started.append((rank, out, self.procs.start(f"collective-rank{rank}", command, env)))
        self._measuring = True
        try:
            answers = [
                self._rank_answer(rank, out, proc, float(call["timeout_s"]))
                for rank, out, proc in started
            ]
        finally:
            self._measuring = False
            self._last_poll = time.monotonic()
        failed = [answer for answer in answers if "failed" in answer]
        return failed[0] if failed else answers[0]

    def _rank_answer(
        self, rank: int, out: Path, proc: subprocess.Popen[bytes], timeout_s: float
    ) -> dict[str, Any]:
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
        """Kill every process of the host on this node; the pids that had to be killed."""
        self._closed.set()
        killed = self.procs.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)
        return killed

    def _watchdog(self) -> None:
        while not self._closed.wait(5.0):
            # A call in progress ends by its own timeout; the driver is counted gone after.
            if not self._measuring and time.monotonic() - self._last_poll > ORPHAN_AFTER_S:
                self.close()  # the driver is gone: leave nothing running
