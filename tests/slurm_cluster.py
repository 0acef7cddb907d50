"""A real Slurm cluster on this machine, for the Slurm fleet tests and the benchmarks.

One munged with a key of its own, one slurmctld and one slurmd per node, every daemon from
Debian's slurm-wlm and munge packages (``make slurm``), started in the foreground in a
temporary folder and bound to 127.0.0.1 on free ports. Several slurmd share this host the
way slurm.conf(5) allows for testing: the same ``NodeHostname``, a ``Port`` each, started
as ``slurmd -N NAME``; ``%n`` keeps their spool, pid and log files apart. Each node stands
for a hardware profile through a ``tcprofile_NAME`` feature and, for a GPU node, a
``gpu`` GRES over device files that are /dev/null's (Slurm counts them and sets
``CUDA_VISIBLE_DEVICES``, so a job sees GPU ids as on a real GPU node; nothing here uses a
device).

No slurmdbd, so no sacct: finished jobs stay in ``scontrol show job`` for ``MinJobAge``.
``SlurmdTimeout`` is 10 s (default 300), so a silent node is declared DOWN quickly.

The tests find this module on pytest's ``pythonpath``; a benchmark puts ``tests/`` on
``sys.path``. Nothing here imports Ray or torchcanary.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from process_helpers import running

FIXTURES = Path(__file__).parent / "fixtures"
PARTITION = "debug"
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol")
# The most fake GPUs a node may have (device files the gres/gpu plugin counts).
FAKE_GPUS = 2


class ClusterUnavailable(Exception):
    """Why no Slurm cluster could be made here (the tests then say 'not checked')."""


@dataclass(frozen=True)
class SlurmNodeSpec:
    """One node: its name, the profile it stands for (feature ``tcprofile_PROFILE``; its
    name by default), its fake GPUs, the variables its jobs' tasks get (as a node's own
    setup would give them), and whether it starts with the cluster (a spare starts later)."""

    name: str
    gpus: int = 0
    profile: str = ""
    env: tuple[tuple[str, str], ...] = ()
    start: bool = True

    @property
    def features(self) -> tuple[str, ...]:
        return (f"tcprofile_{self.profile or self.name}",)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 at this moment."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [int(probe.getsockname()[1]) for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def free_port_range(width: int) -> int:
    """The first port of ``width`` consecutive ports that are free now (for SrunPortRange)."""
    for start in range(42000, 60000, width):
        if all(_port_free(port) for port in range(start, start + width)):
            return start
    raise ClusterUnavailable(f"no {width} consecutive free ports for SrunPortRange")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SlurmCluster:
    """munged, slurmctld and one slurmd per started node; ``env`` points clients at it."""

    def __init__(self, nodes: Sequence[SlurmNodeSpec], parent: Path | None = None) -> None:
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise ClusterUnavailable(
                f"Slurm is not installed ({', '.join(missing)} not found; make slurm)"
            )
        if os.geteuid() != 0:
            raise ClusterUnavailable("slurmd must run as root here (SlurmUser=root)")
        self.nodes = {node.name: node for node in nodes}
        self.root = Path(tempfile.mkdtemp(prefix="canary-slurm-", dir=parent))
        os.chmod(self.root, 0o755)
        self.hostname = socket.gethostname()
        self.conf = self.root / "slurm.conf"
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        try:
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for node in nodes:
                if node.start:
                    self.start_node(node.name, wait=False)
            self.wait_idle([node.name for node in nodes if node.start])
        except BaseException:
            self.destroy()
            raise

    # -- set-up ---------------------------------------------------------------------------

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = self.root / "munge.key"
        _call(["mungekey", "-c", "-k", str(key)])
        key.chmod(0o600)
        self.munge_socket = munge / "sock"
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={munge / 'pid'}",
                f"--log-file={munge / 'log'}",
                f"--seed-file={munge / 'seed'}",
            ],
        )
        _wait_for(lambda: self.munge_socket.exists(), 20, "munged made no socket")

    def _write_conf(self) -> None:
        for folder in ("state", "spool", "run", "log", "fake"):
            (self.root / folder).mkdir(mode=0o755)
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        srun_ports = free_port_range(50)
        self.node_ports = dict(zip(self.nodes, node_ports, strict=True))
        for index in range(FAKE_GPUS):
            # gres/gpu accepts only device files: these are /dev/null's (1, 3) under GPU names.
            os.mknod(self.root / "fake" / f"nvidia{index}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        prolog = self.root / "task_prolog"
        # Slurm's per-task hook: each "export NAME=VALUE" it prints, the task gets. Every
        # task imports the fixtures' units and probes; each node adds its own variables.
        cases = "".join(
            f"  {node.name}) {' '.join(f'echo export {k}={v};' for k, v in node.env)} ;;\n"
            for node in self.nodes.values()
        )
        # A task started with TORCHCANARY_TEST_VISIBLE_GPUS (exported from the driver) sees
        # only those of the GPUs Slurm gave it: a node whose GPU fell off the bus.
        hide = (
            'if [ -n "$TORCHCANARY_TEST_VISIBLE_GPUS" ]; then '
            'echo export CUDA_VISIBLE_DEVICES="$TORCHCANARY_TEST_VISIBLE_GPUS"; fi\n'
        )
        prolog.write_text(
            f"#!/bin/sh\necho export PYTHONPATH={FIXTURES}\n"
            f'case "$SLURMD_NODENAME" in\n{cases}esac\n{hide}',
            encoding="utf-8",
        )
        prolog.chmod(0o755)
        lines = [
            "ClusterName=tcanary",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SrunPortRange={srun_ports}-{srun_ports + 49}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmdPidFile={self.root / 'run'}/%n.pid",
            f"SlurmdLogFile={self.root / 'log'}/%n.log",
            f"SlurmctldPidFile={self.root / 'run'}/slurmctld.pid",
            f"SlurmctldLogFile={self.root / 'log'}/slurmctld.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "GresTypes=gpu",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SlurmdTimeout=10",
            "SlurmctldTimeout=30",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "MinJobAge=600",
            "KillWait=5",
            "ReturnToService=1",
            "SchedulerParameters=sched_interval=1",
            "SlurmdParameters=config_overrides",
            f"TaskProlog={prolog}",
        ]
        for node in self.nodes.values():
            gres = f" Gres=gpu:{node.gpus}" if node.gpus else ""
            lines.append(
                f"NodeName={node.name} NodeHostname={self.hostname} NodeAddr=127.0.0.1 "
                f"Port={self.node_ports[node.name]} CPUs=1 RealMemory=1000 "
                f"Features={','.join(node.features)}{gres} State=UNKNOWN"
            )
        lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES State=UP MaxTime=60")
        self.conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        gres_lines = [
            f"NodeName={node.name} Name=gpu File={self.root / 'fake'}/nvidia[0-{node.gpus - 1}]"
            for node in self.nodes.values()
            if node.gpus
        ]
        (self.root / "gres.conf").write_text("\n".join(gres_lines) + "\n", encoding="utf-8")

    def _spawn(self, name: str, command: list[str]) -> None:
        log = (self.root / f"{name}.out").open("wb")
        self.daemons[name] = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env(),
        )
        log.close()

    # -- what the tests use -----------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *command: str, timeout_s: float = 60) -> str:
        """A Slurm client command's standard output (raises on failure, with its stderr)."""
        return _call(list(command), env=self.env(), timeout_s=timeout_s)

    def start_node(self, name: str, wait: bool = True) -> None:
        """Start (or restart) one node's slurmd; with ``wait``, until Slurm has it idle."""
        (self.root / "spool" / name).mkdir(mode=0o755, exist_ok=True)
        self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)])
        if wait:
            self.wait_idle([name])

    def start_silent_nodes(self, names: Sequence[str]) -> None:
        """Start each of ``names`` whose slurmd does not answer (an earlier test killed it)."""
        states = self.node_states()
        for name in names:
            state = states.get(name, "down*")
            if state.endswith("*") or state.startswith(("down", "unknown")):
                self.start_node(name)

    def wait_idle(self, names: Sequence[str], timeout_s: float = 60) -> None:
        def all_idle() -> bool:
            states = self.node_states()
            # "idle*" (just resumed, not yet answering) is not idle yet.
            return all(states.get(name) == "idle" for name in names)

        _wait_for(all_idle, timeout_s, f"nodes {list(names)} not idle: {self._tail()}")

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo says it (``idle``, ``mixed``, ``down*``, ...)."""
        text = self.run("sinfo", "-N", "-h", "-o", "%N %T")
        return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)

    def kill_node(self, name: str) -> list[int]:
        """Power lost on ``name``: SIGKILL its slurmd and every process of its jobs.

        slurmstepd outlives a killed slurmd, so killing the daemon alone would let a
        running job finish. Returns the pids killed.
        """
        jobs = self.run("squeue", "-h", "-w", name, "-o", "%i").split()
        daemon = self.daemons.pop(f"slurmd-{name}", None)
        killed = []
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
            killed.append(daemon.pid)
        for pid in _job_processes(name, jobs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    def freeze_node(self, name: str) -> list[int]:
        """A node that hangs without dying: SIGSTOP its slurmd and every process of its
        jobs (``thaw`` them after). Returns the pids stopped."""
        jobs = self.run("squeue", "-h", "-w", name, "-o", "%i").split()
        daemon = self.daemons.get(f"slurmd-{name}")
        stopped = []
        for pid in ([daemon.pid] if daemon is not None else []) + _job_processes(name, jobs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        return stopped

    def thaw(self, pids: Sequence[int]) -> None:
        """SIGCONT what ``freeze_node`` stopped."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def down(self, name: str, reason: str = "test") -> None:
        """An administrator takes ``name`` down: its jobs end (drain would let them finish)."""
        self.run("scontrol", "update", f"NodeName={name}", "State=DOWN", f"Reason={reason}")

    def tail(self) -> str:
        return self._tail()

    def _tail(self) -> str:
        logs = sorted((self.root / "log").glob("*.log")) + sorted(self.root.glob("*.out"))
        return " | ".join(
            f"{log.name}: {' '.join(log.read_text(errors='replace').split()[-40:])}" for log in logs
        )

    # -- tear-down --------------------------------------------------------------------------

    def destroy(self, wait_s: float = 20) -> list[int]:
        """Stop every daemon and job process; the pids still alive after that (none)."""
        for name in list(self.daemons):
            if name.startswith("slurmd-"):
                self.kill_node(name.removeprefix("slurmd-"))
        started = [daemon.pid for daemon in self.daemons.values()]
        for daemon in self.daemons.values():
            if daemon.poll() is None:
                daemon.terminate()
        deadline = time.monotonic() + wait_s
        for daemon in self.daemons.values():
            try:
                daemon.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        left = [pid for pid in started if running(pid)]
        left += [pid for node in self.nodes for pid in _job_processes(node)]
        shutil.rmtree(self.root, ignore_errors=True)
        return left


def _job_processes(node: str, job_ids: Sequence[str] = ()) -> list[int]:
    """Processes running a job of ``node`` here: the slurmstepds of ``job_ids`` and every
    task process (``SLURMD_NODENAME=node`` in its environment)."""
    stepd_names = tuple(f"slurmstepd: [{job}.".encode() for job in job_ids)
    marker = f"\0SLURMD_NODENAME={node}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = b"\0" + (proc / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if cmdline.startswith(stepd_names) or marker in environ:
            found.append(int(proc.name))
    return found


def _call(command: list[str], env: Mapping[str, str] | None = None, timeout_s: float = 60) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterUnavailable(f"{command[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise ClusterUnavailable(f"{' '.join(command[:3])} failed: {tail}")
    return done.stdout


def _wait_for(ready: object, timeout_s: float, why: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ClusterUnavailable):
            if callable(ready) and ready():
                return
        time.sleep(0.3)
    raise ClusterUnavailable(why)


# The session's test cluster (``slurm_cluster`` in conftest.py): ``gpu-box`` (two fake GPUs,
# and the feature the ``canary_fleet`` probes look for) and ``plain-box`` stand for two
# hardware profiles; ``plain-box-2``, of plain-box's profile, starts late, for --resume.
TEST_NODES = (
    SlurmNodeSpec(
        "gpu-box",
        gpus=2,
        env=(("CANARY_TEST_FEATURE", "1"), ("CANARY_TEST_SLOW_S", "1")),
    ),
    SlurmNodeSpec("plain-box", env=(("CANARY_TEST_SLOW_S", "60"),)),
    SlurmNodeSpec(
        "plain-box-2", profile="plain-box", env=(("CANARY_TEST_SLOW_S", "1"),), start=False
    ),
)
