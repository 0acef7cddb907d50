"""How a drill starts its processes: torchrun, plain ranks, a store host, in namespaces.

Orchestrator side. Three shapes, all through :class:`~torchcanary.process_set.ProcessSet`
so every process carries the drill's token:
- torchrun on one host (``--standalone``), the way most jobs start;
- torchrun once per node with an explicit c10d rendezvous endpoint on a separate store
  host (``is_host=false``), so the store's host can be killed on its own and nodes can sit
  in their own network namespaces (the same command runs across hosts with --nnodes);
- plain rank processes (RANK/WORLD_SIZE set) sharing the store host, for the in-place
  recovery paths, where torchrun would restart everything and hide what is tested.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from torchcanary.drill.catalog import UNSHARED_STORE, DrillSpec
from torchcanary.drill.netns import RANK_IFNAME, RankNetwork
from torchcanary.process_set import ProcessSet
from torchcanary.worker.calls import DRILL_JOB, DRILL_STORE_HOST

FR_BUFFER_ENTRIES = "20000"
STORE_START_TIMEOUT_S = 90.0
# How long an elastic job's restart waits for missing nodes before going on without them.
ELASTIC_LAST_CALL_S = 10


class LaunchFailed(RuntimeError):
    """A drill process could not even start (the harness's failure, not the version's)."""


@dataclass(frozen=True)
class Area:
    """The drill's scratch folders."""

    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def checkpoints(self) -> Path:
        return self.root / "ckpt"

    @property
    def flight(self) -> Path:
        return self.root / "fr"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def launch_variables(spec: DrillSpec) -> dict[str, str]:
    """The variables every drill process starts with (a reproducer sets them too)."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "TORCH_FR_BUFFER_SIZE": FR_BUFFER_ENTRIES,
    }
    if spec.recovery in UNSHARED_STORE:
        # By default torchrun's agents share one TCPStore with the workers across
        # rendezvous rounds; this makes each round start the workers on a fresh one.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env


def standalone_torchrun(ranks: int, max_restarts: int) -> list[str]:
    """torchrun on one host, after the interpreter and before the job (a reproducer's too)."""
    return [
        *("-m", "torch.distributed.run", "--standalone", "--nnodes", "1"),
        *("--nproc-per-node", str(ranks), "--max-restarts", str(max_restarts)),
        *("--monitor-interval", "0.5"),
    ]


@dataclass
class Launcher:
    python: str
    import_root: Path
    spec: DrillSpec
    area: Area
    procs: ProcessSet

    def base_env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.import_root), **launch_variables(self.spec)}

    def job_args(
        self, recovery: str, store: str | None = None, join_generation: int | None = None
    ) -> list[str]:
        spec, area = self.spec, self.area
        args = [
            "-m",
            DRILL_JOB,
            "--steps",
            str(spec.steps),
            "--events-dir",
            str(area.events),
            "--ckpt-dir",
            str(area.checkpoints),
            "--ckpt-every",
            str(spec.ckpt_every),
            "--fr-dir",
            str(area.flight),
            "--seed",
            str(spec.seed),
            "--parallel",
            spec.parallel,
            "--timeout-s",
            str(spec.timeout_s),
            "--step-pad-s",
            str(spec.step_pad_s),
            "--recovery",
            recovery,
        ]
        if store is not None:
            args += ["--store", store]
        if join_generation is not None:
            args += ["--join-generation", str(join_generation)]
        return args

    def torchrun_standalone(self, max_restarts: int) -> subprocess.Popen[bytes]:
        command = [self.python, *standalone_torchrun(self.spec.ranks, max_restarts)]
        return self.procs.start("torchrun", [*command, *self.job_args("exit")], self.base_env())

    def torchrun_node(
        self,
        nodes: int,
        per_node: int,
        store: str,
        rdzv_id: str,
        max_restarts: int,
        min_nodes: int | None = None,
    ) -> list[str]:
        """One node's torchrun (without the job's arguments) for a job of ``nodes`` nodes,
        rendezvousing at the store host ``store``; here or on a fleet node.

        With ``min_nodes`` the job is elastic: a restart goes on with as few as that many
        nodes once the others have had ``ELASTIC_LAST_CALL_S`` to join.
        """
        conf = "is_host=false"
        if min_nodes is not None:
            conf += f",last_call_timeout={ELASTIC_LAST_CALL_S}"
        return [
            self.python,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nodes) if min_nodes is None else f"{min_nodes}:{nodes}",
            "--nproc-per-node",
            str(per_node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            store,
            "--rdzv-id",
            rdzv_id,
            "--rdzv-conf",
            conf,
            "--max-restarts",
            str(max_restarts),
            "--monitor-interval",
            "0.5",
        ]

    def torchrun_nodes(
        self, store: str, max_restarts: int, network: RankNetwork | None
    ) -> list[subprocess.Popen[bytes]]:
        """One torchrun per node (one rank each), rendezvousing at ``store``."""
        nodes = self.spec.ranks if network is not None else 1
        per_node = 1 if network is not None else self.spec.ranks
        launched = []
        for node in range(nodes):
            command = self.torchrun_node(nodes, per_node, store, self.procs.token, max_restarts)
            env = self.base_env()
            env["TORCHCANARY_NODE"] = str(node)
            if network is not None:
                command = [
                    *network.prefix(node),
                    *command,
                    "--local-addr",
                    network.rank_address(node),
                ]
                env["GLOO_SOCKET_IFNAME"] = RANK_IFNAME
            command += self.job_args("exit")
            launched.append(self.procs.start(f"torchrun-node{node}", command, env))
        return launched

    def store_host(self, host: str) -> tuple[subprocess.Popen[bytes], str]:
        """Start the store host; returns it and its ``host:port`` once it listens."""
        port_file = self.area.root / "store.port"
        port_file.unlink(missing_ok=True)
        proc = self.procs.start(
            "store",
            [
                self.python,
                "-m",
                DRILL_STORE_HOST,
                "--host",
                host,
                "--port-file",
                str(port_file),
            ],
            self.base_env(),
        )
        deadline = time.monotonic() + STORE_START_TIMEOUT_S
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LaunchFailed(
                    f"the store host did not start: {self.procs.log_tail('store', 600)}"
                )
            time.sleep(0.1)
        return proc, f"{host}:{port_file.read_text().strip()}"

    def rank(
        self,
        rank: int,
        recovery: str,
        store: str,
        network: RankNetwork | None,
        join_generation: int | None = None,
    ) -> subprocess.Popen[bytes]:
        env = self.base_env()
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": "0" if network else str(rank),
                "WORLD_SIZE": str(self.spec.ranks),
                "TORCHCANARY_NODE": str(rank),
            }
        )
        command = [self.python, *self.job_args(recovery, store, join_generation)]
        if network is not None:
            command = [*network.prefix(rank), *command]
            env["GLOO_SOCKET_IFNAME"] = RANK_IFNAME
        name = f"rank{rank}" if join_generation is None else f"rank{rank}-join{join_generation}"
        return self.procs.start(name, command, env)


@dataclass(frozen=True)
class CapacityProblem:
    """Why a drill's ranks will not fit here. ``lasting``: the machine itself is too small
    (an honest "not checkable here"); else the shortfall is of the moment (memory others
    hold now), a drill that did not run, not a fact of the machine."""

    reason: str
    lasting: bool


def _meminfo() -> str:
    return Path("/proc/meminfo").read_text()


def _kib(meminfo: str, field: str) -> int:
    return int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith(field)))


def machine_capacity_problem(ranks: int) -> CapacityProblem | None:
    """Why ``ranks`` training processes will not fit here, or None when they do.

    Each rank of the drill job holds about 0.6 GiB (torch plus gloo buffers).
    """
    need_gib = 0.6 * (ranks + 1)
    if ranks > 4 * (os.cpu_count() or 1):
        why = f"{ranks} ranks on {os.cpu_count()} CPUs would starve: lower drill.ranks"
        return CapacityProblem(why, lasting=True)
    try:
        meminfo = _meminfo()
        total_gib, available_gib = (
            _kib(meminfo, field) / 2**20 for field in ("MemTotal:", "MemAvailable:")
        )
    except (OSError, StopIteration, ValueError):
        return None  # cannot tell; let the drill try
    if total_gib < need_gib:
        why = (
            f"{ranks} ranks need about {need_gib:.1f} GiB but this machine has "
            f"{total_gib:.1f} GiB: lower drill.ranks"
        )
        return CapacityProblem(why, lasting=True)
    if available_gib < need_gib:
        why = (
            f"{ranks} ranks need about {need_gib:.1f} GiB but only {available_gib:.1f} GiB of "
            f"{total_gib:.1f} GiB were free at launch: run it again when the machine is quieter"
        )
        return CapacityProblem(why, lasting=False)
    return None
