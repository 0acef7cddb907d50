"""The processes whose death is a node's death, for the engine this process runs under.

A drill's ``node-kill`` stands for power lost on one node: the engine's daemon there must
die, or the cluster never learns the node is gone. Under Ray that is the raylet, the
parent of every worker (a rank host included). Under Slurm it is the node's slurmd, and
with it the job's step daemons (slurmstepd outlives a killed slurmd and would report the
steps as ended normally) and the job's other processes on this node. Standard library
only: it runs on the node, inside the host.
"""

from __future__ import annotations

import os
from pathlib import Path

# Set by slurmd in every task of a job; absent under Ray.
_SLURM_NODE = "SLURMD_NODENAME"


def node_daemon() -> tuple[list[int], str]:
    """What to kill, in order (this process last, by its caller), and a few words on it."""
    node = os.environ.get(_SLURM_NODE)
    if node is None:
        raylet = os.getppid()
        return [raylet], f"its raylet (pid {raylet})"
    job = os.environ.get("SLURM_JOB_ID", "")
    tasks = [pid for pid, env in _environments() if _says(env, _SLURM_NODE, node)
             and _says(env, "SLURM_JOB_ID", job) and pid != os.getpid()]  # fmt: skip
    stepds = sorted({_parent(pid) for pid in [*tasks, os.getpid()]} - {0, 1})
    stepds = [pid for pid in stepds if _name(pid) == "slurmstepd"]
    daemons = _slurmds(node)
    detail = f"its slurmd (pid {', '.join(map(str, daemons)) or 'not found'}) and job {job}"
    return [*stepds, *tasks, *daemons], detail


def daemon_owner() -> int:
    """The user that owns the node's daemon (-1 if unknown): killing it takes that user."""
    pids, _ = node_daemon()
    try:
        return os.stat(f"/proc/{pids[-1]}").st_uid if pids else -1
    except OSError:
        return -1


def _slurmds(node: str) -> list[int]:
    """This node's slurmd: the one started ``-N NODE`` (several on one host), else the
    only one."""
    found = [(pid, cmdline) for pid, cmdline in _cmdlines() if _name(pid) == "slurmd"]
    named = [pid for pid, cmdline in found if f"\0-N\0{node}\0" in f"\0{cmdline}\0"]
    if named:
        return named
    unnamed = [pid for pid, cmdline in found if "\0-N\0" not in f"\0{cmdline}\0"]
    return unnamed if len(unnamed) == 1 else []


def _environments() -> list[tuple[int, bytes]]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found.append((int(proc.name), b"\0" + (proc / "environ").read_bytes()))
            except OSError:
                continue
    return found


def _cmdlines() -> list[tuple[int, str]]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                text = (proc / "cmdline").read_bytes().rstrip(b"\0").decode(errors="replace")
            except OSError:
                continue
            found.append((int(proc.name), text))
    return found


def _says(environ: bytes, name: str, value: str) -> bool:
    return f"\0{name}={value}\0".encode() in environ + b"\0"


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
