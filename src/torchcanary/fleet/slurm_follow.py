"""Following the Slurm executor's units: each unit's records read from the shared folder
as they land, its end decided by its own end record or else by Slurm's word on its job.

A reader thread per dispatch reads every unit's output lines every ``READ_S`` and asks
``squeue`` for the jobs still out every ``POLL_S``. NODE_FAIL, CANCELLED, PREEMPTED,
BOOT_FAIL (and a job Slurm forgot, one pending while no node it may use is up, or one
running whose heartbeat stayed still past the bound) end a unit LOST, saying how long
after its last heartbeat that was noticed; FAILED, TIMEOUT, OUT_OF_MEMORY, a job that
completed without an end record, or a line whose MAC fails (never handed on), end it
FAILED with why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchcanary.errors import FleetError
from torchcanary.fleet import slurm_cli
from torchcanary.fleet.executor import Assignment, tagged_result
from torchcanary.fleet.secrets import strip_text
from torchcanary.fleet.signed_lines import Refused, verify
from torchcanary.fleet.slurm_node import beat_path
from torchcanary.fleet.unit import UnitResult, UnitStatus, noticed_since
from torchcanary.hardware_profile import FleetNode

POLL_S = 1.0  # how often squeue is asked about the units still out
READ_S = 0.1  # how often their output files are read

# Jobs whose node or scheduler took the work away: the unit may run again (LOST).
LOST_STATES = ("NODE_FAIL", "CANCELLED", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED")
FAILED_STATES = ("FAILED", "TIMEOUT", "OUT_OF_MEMORY")
# A unit pending on a node that went down or was drained is lost after this long.
PENDING_GRACE_S = 30.0
# How long slurmctld may stay silent before every unit still out is counted lost.
SCHEDULER_SILENCE_S = 120.0


@dataclass
class FollowedUnit:
    """One dispatched unit as the reader follows it."""

    assignment: Assignment
    out: Path
    log: Path
    key: bytes  # the dispatch's: each line of ``out`` must carry its MAC
    job_id: str = ""
    read: int = 0  # bytes of ``out`` already handed on
    last_life: float = field(default_factory=time.monotonic)
    beat: str = ""  # what the heartbeat file said last
    pending_down_since: float | None = None
    ran_on: str = ""  # the node Slurm chose, once a record or squeue names it
    lines: int = 0  # whole lines of ``out`` accepted
    running_since: float | None = None  # when squeue first said RUNNING


class UnitFollower:
    """Hands on each unit's records and its one end; told how to ask whether some node a
    unit may land on is up, how to drop a job from the executor's list, when the executor
    closed, and how long a running unit's heartbeat may stay still before it is lost."""

    def __init__(
        self,
        placeable: Callable[[Assignment], bool],
        forget: Callable[[str], None],
        stop: threading.Event,
        lost_after_s: float,
    ) -> None:
        self._placeable = placeable
        self._lost_after_s = lost_after_s
        self._forget = forget
        self._stop = stop

    def follow(self, units: list[FollowedUnit], put: Callable[[UnitResult], None]) -> None:
        """Hand on each unit's new records as they land (files read every ``READ_S``), and
        end those Slurm says ended without one (squeue asked every ``POLL_S``)."""
        out = list(units)
        silent_since: float | None = None
        try:
            while out and not self._stop.is_set():
                out = self._read_for(out, put, POLL_S)
                if not out:
                    break
                try:
                    states = slurm_cli.job_states([unit.job_id for unit in out])
                    silent_since = None
                except FleetError as exc:
                    silent_since = silent_since or time.monotonic()
                    if time.monotonic() - silent_since > SCHEDULER_SILENCE_S:
                        for unit in out:
                            put(self._lost(unit, f"slurmctld did not answer: {exc}"))
                        return
                    continue
                out = [unit for unit in out if not self._judge(unit, states.get(unit.job_id), put)]
        except Exception as exc:  # the reader's own failure is every open unit's end
            for unit in out:
                put(ended(unit.assignment, UnitStatus.FAILED, f"error: its reader stopped: {exc}"))
            return
        for unit in out:  # closed while units were out
            put(self._lost(unit, "the driver closed the fleet before the unit ended"))

    def _read_for(
        self, out: list[FollowedUnit], put: Callable[[UnitResult], None], seconds: float
    ) -> list[FollowedUnit]:
        """Read every unit's new lines for ``seconds``; the units not yet ended."""
        deadline = time.monotonic() + seconds
        while True:
            out = [unit for unit in out if not self._read(unit, put)]
            if not out or time.monotonic() >= deadline or self._stop.is_set():
                return out
            time.sleep(READ_S)

    def _read(self, unit: FollowedUnit, put: Callable[[UnitResult], None]) -> bool:
        """Hand on the whole lines added since the last read; True once the end is read."""
        try:
            beat = beat_path(unit.out).read_text(encoding="utf-8")
        except OSError:
            beat = ""
        if beat != unit.beat:
            unit.beat, unit.last_life = beat, time.monotonic()
        try:
            with unit.out.open("rb") as lines:
                lines.seek(unit.read)
                chunk = lines.read()
        except FileNotFoundError:
            return False
        whole = chunk[: chunk.rfind(b"\n") + 1]
        unit.read += len(whole)
        for number, line in enumerate(whole.decode("utf-8").splitlines(), unit.lines + 1):
            try:
                record = UnitResult.from_json(verify(unit.key, line))
            except (Refused, ValueError, KeyError, TypeError) as exc:
                # Never committed: the unit ends here, its job cancelled, the line named.
                slurm_cli.cancel([unit.job_id])
                self._forget(unit.job_id)
                why = f"refused line {number} of {unit.out}: {exc}"
                put(ended(unit.assignment, UnitStatus.FAILED, f"error: {why}"))
                return True
            unit.lines = number
            unit.ran_on = record.node_id or unit.ran_on
            result = tagged_result(record, _node(unit))
            if result.status is UnitStatus.PARTIAL:
                put(result)
                continue
            put(result)
            self._forget(unit.job_id)
            return True
        return False

    def _judge(
        self,
        unit: FollowedUnit,
        state: slurm_cli.JobState | None,
        put: Callable[[UnitResult], None],
    ) -> bool:
        """End ``unit`` if Slurm says its job ended (after a last read); True if ended."""
        if state is not None and state.nodes and state.state != "PENDING":
            unit.ran_on = unit.ran_on or state.nodes
        if state is None or state.state in (*LOST_STATES, *FAILED_STATES, "COMPLETED"):
            if self._read(unit, put):  # the end record may have landed since
                return True
            self._forget(unit.job_id)
        if state is None:
            where = slurm_cli.accounting_note()
            put(self._lost(unit, f"Slurm no longer knows job {unit.job_id} ({where})"))
            return True
        if state.state in LOST_STATES:
            why = f"job {unit.job_id} {state.state} ({state.reason})"
            put(self._lost(unit, why))
            return True
        if state.state in FAILED_STATES:
            why = f"job {unit.job_id} {state.state}: {_tail(unit.log)}"
            put(
                ended(
                    replace(unit.assignment, node=_node(unit)), UnitStatus.FAILED, f"error: {why}"
                )
            )
            return True
        if state.state == "COMPLETED":
            why = f"job {unit.job_id} ended without a result: {_tail(unit.log)}"
            put(ended(unit.assignment, UnitStatus.FAILED, f"error: {why}"))
            return True
        if state.state == "RUNNING":
            return self._silent(unit, put)
        if state.state == "PENDING" and not self._placeable(unit.assignment):
            unit.pending_down_since = unit.pending_down_since or time.monotonic()
            if time.monotonic() - unit.pending_down_since > PENDING_GRACE_S:
                slurm_cli.cancel([unit.job_id])
                self._forget(unit.job_id)
                put(self._lost(unit, f"job {unit.job_id} waited while no node it may use was up"))
                return True
        return False

    def _silent(self, unit: FollowedUnit, put: Callable[[UnitResult], None]) -> bool:
        """End a running unit LOST (its job cancelled) once its heartbeat has been still
        for ``lost_after_s``; its clock starts when the job is first seen running."""
        if unit.running_since is None:
            unit.running_since = unit.last_life = time.monotonic()
            return False
        silent = time.monotonic() - unit.last_life
        if silent <= self._lost_after_s:
            return False
        slurm_cli.cancel([unit.job_id])
        self._forget(unit.job_id)
        why = f"job {unit.job_id} RUNNING but no heartbeat (bound {self._lost_after_s:.0f}s)"
        put(self._lost(unit, why))
        return True

    def _lost(self, unit: FollowedUnit, why: str) -> UnitResult:
        """LOST, with how long after the unit's last sign of life (its heartbeat) it was
        noticed: the detection time, SlurmdTimeout included."""
        noticed = noticed_since(unit.last_life)
        node = unit.ran_on or unit.assignment.node.node_id
        return ended(
            replace(unit.assignment, node=_node(unit)),
            UnitStatus.LOST,
            f"node {node} went away before the unit finished: {why}; "
            f"noticed {noticed:.1f}s after its last heartbeat",
            noticed,
        )


def _node(unit: FollowedUnit) -> FleetNode:
    """The node the unit ran on (Slurm chose it among its profile's), else its assigned one."""
    node = unit.assignment.node
    return replace(node, node_id=unit.ran_on) if unit.ran_on else node


def ended(
    assignment: Assignment, status: UnitStatus, why: str, noticed_s: float | None = None
) -> UnitResult:
    node = assignment.node
    return UnitResult(
        assignment.unit.unit_id,
        status,
        node.node_id,
        node.profile.key,
        error=strip_text(why),
        noticed_s=noticed_s,
    )


def _tail(log: Path, limit: int = 400) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "no job log"
    return strip_text(" ".join(text.split())[-limit:]) or "empty job log"
