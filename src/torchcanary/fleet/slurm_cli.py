"""Slurm's own commands, run for the Slurm executor: the only module that runs them.

No Slurm Python package: pyslurm has no release for the libslurm a cluster like Debian
12's (22.05) runs, and submitit reads job states only from ``sacct``, which needs
slurmdbd (many clusters have none), pickles callables where our units are JSON, and hands
back one result at the end. The commands here (``sinfo``, ``sbatch --parsable``,
``squeue``, ``scontrol``, ``scancel``, ``srun``) are what every Slurm user already has, with
formats fixed by ``-o``; each failure is one FleetError line naming the command and fix.
``sacct`` is asked only for a job squeue has forgotten, and only where accounting is kept.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchcanary.errors import FleetError
from torchcanary.fleet.secrets import strip_text
from torchcanary.fleet.signed_lines import PRIVATE_UMASK

_TIMEOUT_S = 30.0
_FIX = "run torchcanary where Slurm's commands work (a login node of the cluster)"
# sinfo's ``%T``: a state, then flag characters (sinfo(1), NODE STATE CODES). The text is
# parsed rather than ``sinfo --json``, whose node-state fields changed shape between data
# parser versions (22.05's string and flag list, 23.02's list) and which needs the JSON
# serializer plugin installed; ``%T`` reads the same on every version.
# States that take work now or once Slurm has powered the node up (power saving).
_TAKES_WORK = frozenset(
    ("idle", "mixed", "allocated", "completing", "planned", "blocked", "powered_down",
     "powering_up")
)  # fmt: skip
# Flags that keep a node from new work: "*" slurmd not answering, "!" and "%" powering
# down, "$" in a maintenance reservation, "@" reboot pending, "^" rebooting. The others
# take work: "~" powered off (Slurm boots it for a job), "#" powering up, "-" planned.
_HELD_FLAGS = frozenset("*!%$@^")
_FLAGS = "*~#!%$@^-"
# What a client keeps of the environment it runs in: where the cluster's config is, and
# which clusters a federated site talks to; inside an allocation every other SLURM_*
# variable is the driver's own job (SLURM_JOB_ID would make srun a step of it).
_KEPT_SLURM = ("SLURM_CONF", "SLURM_CLUSTERS")
# How often a step that waits for a node says so.
_WAITING_EVERY_S = 15.0
# Slurm's own default SlurmdTimeout, for a cluster whose config cannot be read.
DEFAULT_SLURMD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SlurmNode:
    """One node as sinfo lists it."""

    name: str
    features: tuple[str, ...]
    gres: tuple[str, ...]
    cpus: int
    memory_mb: int
    state: str
    address: str

    @property
    def usable(self) -> bool:
        return usable_state(self.state)

    @property
    def gpus(self) -> int:
        """GPUs in its GRES (``gpu:2``, ``gpu:a100:4``, ``gpu:4(S:0-1)``)."""
        total = 0
        for item in self.gres:
            name, _, rest = item.partition(":")
            if name == "gpu" and rest:
                count = rest.split("(")[0].rsplit(":", 1)[-1]
                total += int(count) if count.isdigit() else 0
        return total


@dataclass(frozen=True)
class JobState:
    """One job's state as squeue (or scontrol, once it left squeue) tells it."""

    job_id: str
    state: str
    reason: str
    nodes: str


def usable_state(state: str, reserved_ok: bool = False) -> bool:
    """Whether a node in sinfo's ``%T`` ``state`` takes work: up, answering, not drained,
    failing, in maintenance or rebooting; ``reserved`` (an advanced reservation) only
    with ``reserved_ok`` (the run names a reservation)."""
    base, flags = parse_state(state)
    if flags & _HELD_FLAGS:
        return False
    return base in _TAKES_WORK or (base == "reserved" and reserved_ok)


def parse_state(state: str) -> tuple[str, frozenset[str]]:
    """``idle~`` as (``idle``, {``~``}); ``drained*`` as (``drained``, {``*``})."""
    text = state.strip().lower()
    base = text.rstrip(_FLAGS)
    return base, frozenset(text[len(base) :])


def own_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (this process's) without the job variables a Slurm allocation sets, so
    torchcanary run inside a job (``sbatch --wrap "torchcanary run ..."``) submits jobs
    and steps of its own, not steps of its driver's job; ``SLURM_CONF`` and
    ``SLURM_CLUSTERS`` are kept."""
    names = os.environ if environ is None else environ
    return {
        name: value
        for name, value in names.items()
        if not name.startswith("SLURM_") or name in _KEPT_SLURM
    }


def slurm(*command: str, timeout_s: float = _TIMEOUT_S) -> str:
    """A Slurm command's standard output; FleetError in one line when it cannot answer."""
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=own_environment(),
            umask=PRIVATE_UMASK,  # sbatch hands it to the job: its log is this user's alone
        )
    except FileNotFoundError:
        raise FleetError(f"--fleet slurm needs Slurm's {command[0]}, not found; {_FIX}") from None
    except subprocess.TimeoutExpired:
        raise FleetError(
            f"Slurm's {command[0]} did not answer within {timeout_s:.0f}s; "
            "check that slurmctld is up (scontrol ping)"
        ) from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[-300:] or f"exit {done.returncode}"
        raise FleetError(f"Slurm's {command[0]} failed: {strip_text(said)}")
    return done.stdout


def default_partition() -> str:
    """The partition sinfo marks as the default (``debug*``)."""
    for line in slurm("sinfo", "-h", "-o", "%P").split():
        if line.endswith("*"):
            return line.rstrip("*")
    raise FleetError("the Slurm cluster has no default partition; name one: --fleet slurm:PART")


def check_partition(partition: str) -> None:
    """FleetError naming the partitions there are when ``partition`` is not one of them."""
    names = [line.rstrip("*") for line in slurm("sinfo", "-h", "-o", "%P").split()]
    if partition not in names:
        raise FleetError(
            f"the Slurm cluster has no partition {partition!r}; "
            f"use --fleet slurm:PART with one of: {', '.join(names) or 'none'}"
        )


def sinfo_nodes(partition: str) -> list[SlurmNode]:
    """Every node of ``partition``, one row each (a node in several states is one row)."""
    text = slurm("sinfo", "-N", "-h", "-p", partition, "-o", "%N|%f|%G|%c|%m|%T|%o")
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 7:
            continue
        name, features, gres, cpus, memory, state, address = cells
        nodes[name] = SlurmNode(
            name=name,
            features=_listed(features),
            gres=_listed(gres),
            cpus=int(cpus) if cpus.isdigit() else 1,
            memory_mb=int(memory) if memory.isdigit() else 0,
            state=state,
            address=address,
        )
    return sorted(nodes.values(), key=lambda node: node.name)


def node_state(name: str) -> str:
    """sinfo's state of one node (``idle``, ``down*``, ``drained``...); "" if unknown."""
    try:
        return slurm("sinfo", "-N", "-h", "-n", name, "-o", "%T").split("\n")[0].strip()
    except FleetError:
        return ""


def slurmd_timeout() -> tuple[float, str]:
    """SlurmdTimeout (how long slurmctld waits on a silent slurmd before it counts the node
    down) as ``scontrol show config`` says it, and where the figure came from."""
    try:
        seconds = parse_slurmd_timeout(slurm("scontrol", "show", "config"))
    except FleetError as exc:
        return DEFAULT_SLURMD_TIMEOUT_S, f"Slurm's default SlurmdTimeout ({exc})"
    if seconds is None:
        return DEFAULT_SLURMD_TIMEOUT_S, "Slurm's default SlurmdTimeout (scontrol shows none)"
    return seconds, "SlurmdTimeout"


def parse_slurmd_timeout(config: str) -> float | None:
    """The seconds of ``SlurmdTimeout = 300 sec`` in ``scontrol show config``'s text."""
    for line in config.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "SlurmdTimeout":
            number = value.split()[0] if value.split() else ""
            return float(number) if number.isdigit() else None
    return None


def partition_max_minutes(partition: str) -> int | None:
    """The partition's MaxTime in minutes (a job asking more waits forever); None when
    unlimited or not shown."""
    for word in slurm("scontrol", "-o", "show", "partition", partition).split():
        name, _, value = word.partition("=")
        if name == "MaxTime":
            return slurm_minutes(value)
    return None


def slurm_minutes(text: str) -> int | None:
    """Whole minutes of a Slurm time (``MaxTime``'s ``1-00:00:00``, ``30:00``, ``90``);
    None for UNLIMITED, INFINITE or text that is not a time."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not all(part.isdigit() for part in parts) or (days and not days.isdigit()):
        return None
    numbers = [int(part) for part in parts]
    # Whole minutes, seconds dropped: the figure caps a limit, so it must not round up.
    if len(numbers) == 3:
        hours, minutes = numbers[:2]
    elif len(numbers) == 2:
        # "H:M" after a day count, "M:S" alone (as sbatch reads them).
        hours, minutes = (numbers[0], numbers[1]) if days else (0, numbers[0])
    else:
        hours, minutes = (numbers[0], 0) if days else (0, numbers[0])
    return (int(days or 0) * 24 + hours) * 60 + minutes


def submit(arguments: Sequence[str]) -> str:
    """``sbatch --parsable ARGUMENTS``: the new job's id."""
    said = slurm("sbatch", "--parsable", *arguments).strip()
    return said.split(";")[0]


def job_states(job_ids: Sequence[str]) -> dict[str, JobState]:
    """The state of each job Slurm still knows: squeue's (it keeps an ended job for
    MinJobAge), then, for a job it has forgotten, the accounting database's where the
    cluster keeps one (``sacct``)."""
    if not job_ids:
        return {}
    try:
        text = slurm("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r|%N")
    except FleetError as exc:
        # squeue fails outright when it knows none of the ids (all past MinJobAge): an
        # answer, not a silent slurmctld.
        if "Invalid job id" not in str(exc):
            raise
        text = ""
    states = {}
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) == 4:
            states[cells[0]] = JobState(*cells)
    forgotten = [job_id for job_id in job_ids if job_id not in states]
    return {**accounted_states(forgotten), **states}


def accounted_states(job_ids: Sequence[str]) -> dict[str, JobState]:
    """Each job's state in Slurm's accounting (``sacct``), which outlives MinJobAge; {}
    on a cluster without slurmdbd (sacct then says accounting storage is disabled), asked
    once per process."""
    if not job_ids or not _accounting.get("kept", True):
        return {}
    try:
        text = slurm(
            "sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,Reason,NodeList"
        )
    except FleetError as exc:
        _accounting["kept"] = False
        _accounting["why"] = str(exc)
        return {}
    _accounting["kept"] = True
    return parse_sacct(text)


# Whether this cluster keeps accounting ("kept"), and why not ("why"), once sacct answered.
_accounting: dict[str, Any] = {}


def accounting_note() -> str:
    """Where job states come from, for the run's record: "" until sacct was asked."""
    if "kept" not in _accounting:
        return ""
    if _accounting["kept"]:
        return "squeue, then sacct for jobs squeue has forgotten"
    return f"squeue only (no accounting: {_accounting['why']})"


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -n -P -X -o JobID,State,Reason,NodeList`` as states: ``CANCELLED by 1000``
    reads as ``CANCELLED``; the reason ``None`` as ""."""
    states = {}
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 4 or not cells[0]:
            continue
        job_id, state, reason, nodes = cells
        word = state.split()[0] if state.split() else ""
        reason = "" if reason == "None" else reason
        states[job_id] = JobState(job_id, word, reason, "" if nodes == "None assigned" else nodes)
    return states


def cancel(job_ids: Sequence[str]) -> None:
    """scancel; a job that already ended is no error."""
    if job_ids:
        subprocess.run(
            ["scancel", *job_ids], capture_output=True, timeout=_TIMEOUT_S, env=own_environment()
        )


def run_step(arguments: Sequence[str], timeout_s: float, waiting: Callable[[float], None]) -> str:
    """``srun ARGUMENTS`` to its end: its standard output. While it waits for a node (the
    profile's nodes all busy), ``waiting(seconds)`` is told every 15 s; FleetError after
    ``timeout_s``."""
    try:
        step = subprocess.Popen(
            ["srun", *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=own_environment(),
        )
    except FileNotFoundError:
        raise FleetError(f"--fleet slurm needs Slurm's srun, not found; {_FIX}") from None
    started = time.monotonic()
    while True:
        try:
            out, err = step.communicate(timeout=_WAITING_EVERY_S)
            break
        except subprocess.TimeoutExpired:
            waited = time.monotonic() - started
            if waited >= timeout_s:
                step.kill()
                step.communicate()
                raise FleetError(f"Slurm's srun got no node within {timeout_s:.0f}s") from None
            waiting(waited)
    if step.returncode != 0:
        said = " ".join((err or out).split())[-300:] or f"exit {step.returncode}"
        raise FleetError(f"Slurm's srun failed: {strip_text(said)}")
    return out


def _listed(cell: str) -> tuple[str, ...]:
    return tuple(item for item in cell.split(",") if item and item != "(null)")
