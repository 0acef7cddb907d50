"""The contract for a user's job that recovers in place: what it is told, and what it tells.

Worker side, standard library only: it runs inside the user's job. For ``shrink`` and
``reconfigure`` the drill cannot use torchrun (it would restart everything and hide what is
drilled), so it starts one plain process per rank through the shim, with ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` naming a store that outlives
any rank, and ``TORCHELASTIC_USE_AGENT_STORE=True`` so a plain
``init_process_group("gloo")`` joins that store as a client. A job that recovers in place
asks :func:`in_place_drill` where it stands and tells the drill what it does::

    drill = in_place_drill()          # None outside an in-place drill (and under torchrun)
    ...                               # on a failed collective: agree who died, then
    report_recovering(dead, generation)   # the drill starts a replacement for each dead rank
    ...                               # rebuild the group (e.g. dist._reconfigure), restore
    report_recovered(dead=dead)           # its state, and train on

A replacement is started the same way with ``drill.join_generation`` set (the generation
it was reported for). For ``shrink`` the survivors go on without the dead ranks (the world
shrinks), and the fault-free run it is compared with must change its world at the same
step: that run is started in place too, with ``drill.leave_after_step`` and
``drill.leaving`` set, and the job lets those ranks leave cleanly after that step, the
others going on without them exactly as they would after losing them.

A job that cannot take the path asked for calls ``report_unsupported(reason)`` and exits:
the drill reports the path *absent* with that reason. A job that never calls
:func:`in_place_drill` does not recover in place; the drill says so (absent), whatever the
job did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torchcanary.worker.drill import job_report

RECOVERY_VARIABLE = "TORCHCANARY_DRILL_IN_PLACE"
STORE_VARIABLE = "TORCHCANARY_DRILL_STORE"
JOIN_VARIABLE = "TORCHCANARY_DRILL_JOIN_GENERATION"
LEAVE_VARIABLE = "TORCHCANARY_DRILL_LEAVE"  # "STEP:RANK[,RANK...]", in a shrink's reference


@dataclass(frozen=True)
class InPlaceDrill:
    """An in-place drill as a rank sees it."""

    recovery: str  # "shrink" or "reconfigure": the path the drill asks the job to take
    store_host: str  # the drill's store: it lives through any rank's death
    store_port: int
    join_generation: int | None  # set in a replacement: the generation it was started for
    leave_after_step: int | None = None  # fault-free shrink: ``leaving`` go after this step
    leaving: tuple[int, ...] = ()


def in_place_drill() -> InPlaceDrill | None:
    """This rank's in-place drill, or None when the job is not under one."""
    recovery = os.environ.get(RECOVERY_VARIABLE)
    store = os.environ.get(STORE_VARIABLE)
    if not recovery or not store:
        return None
    host, _, port = store.rpartition(":")
    join = os.environ.get(JOIN_VARIABLE)
    step, _, ranks = os.environ.get(LEAVE_VARIABLE, "").partition(":")
    drill = InPlaceDrill(
        recovery,
        host,
        int(port),
        int(join) if join else None,
        int(step) if step else None,
        tuple(int(rank) for rank in ranks.split(",") if rank),
    )
    job_report.emit(
        "in_place", recovery=recovery, joining=join, leave_after_step=drill.leave_after_step
    )
    return drill


def report_recovering(dead: list[int], generation: int) -> None:
    """The ranks agreed ``dead`` are gone at ``generation``: the drill starts replacements
    (for ``reconfigure``) that join with ``join_generation == generation``."""
    job_report.emit("recovering", dead=[int(rank) for rank in dead], generation=int(generation))


def report_recovered(**facts: object) -> None:
    """The group is rebuilt and the state restored; ``facts`` are kept with the drill."""
    job_report.emit("recovered", **facts)


def report_unsupported(reason: str) -> None:
    """This job (or its torch) cannot take the path asked for: the drill says absent."""
    job_report.emit("unsupported", reason=str(reason)[:600])
