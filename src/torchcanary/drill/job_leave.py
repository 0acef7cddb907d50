"""The fault-free run a ``shrink`` drill of a user's job is compared with.

Orchestrator side. After a shrink the survivors train a smaller world, so no run of the full
world is a fair reference from the fault on: the batches, the averaged gradients and the
reported losses all change with the world. The reference is made in place instead, like the
drill (plain ranks sharing the drill's store), with ``TORCHCANARY_DRILL_LEAVE`` set to
``AT_STEP:TARGET_RANK``: the job lets that rank leave cleanly after ``at_step`` and the
others shrink exactly as they would after losing it (``job_inplace.py``). A rank killed
between steps and one killed inside the next step's backward pass both leave the world
after ``at_step``: the step it died in is redone by the survivors alone, so one reference
serves both moments.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from typing import Any

from torchcanary.drill import job_exits
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.job_exits import RankDeath
from torchcanary.drill.launch import Launcher

SHRINK = "shrink"


def reference_spec(spec: DrillSpec) -> DrillSpec:
    """The fault-free spec a drill is compared with; a shrink's keeps its recovery path,
    which tells the launcher to start it in place with the target leaving."""
    return replace(spec, fault="none", recovery=SHRINK if spec.recovery == SHRINK else "reference")


def leaving(spec: DrillSpec) -> str | None:
    """``AT_STEP:RANK`` for a shrink's fault-free run (``LEAVE_VARIABLE``), else None."""
    if spec.fault != "none" or spec.recovery != SHRINK:
        return None
    return f"{spec.at_step}:{spec.target_rank}"


def start(launcher: Launcher, spec: DrillSpec) -> list[subprocess.Popen[bytes]]:
    """The ranks of a shrink's fault-free run, sharing a store that the caller's process set
    ends with them."""
    _, store = launcher.store_host("127.0.0.1")
    return [launcher.rank(rank, SHRINK, store, None) for rank in range(spec.ranks)]


def deaths(
    codes: list[int | None], logs: list[str], events: list[dict[str, Any]]
) -> list[RankDeath]:
    """The ranks of that run that died of a signal, each with its last words."""
    found = (
        job_exits.process_death(rank, code, log, events)
        for rank, (code, log) in enumerate(zip(codes, logs, strict=True))
    )
    return [death for death in found if death is not None]


def teardown(codes: list[int | None], deaths: list[RankDeath]) -> list[RankDeath] | None:
    """The deaths, when every rank that did not exit 0 died of a signal after its work was
    done (teardown trouble, no failed run); None otherwise."""
    failed = [code for code in codes if code != 0]
    if not deaths or len(deaths) != len(failed) or not all(d.after_done for d in deaths):
        return None
    return deaths


def facts(spec: DrillSpec, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the reference says of its world change: where, who, and whether the job took part
    (``opted_in``) or said it cannot (``unsupported``)."""
    unsupported = next((e["reason"] for e in events if e["ev"] == "unsupported"), None)
    return {
        "parallel": "job-shrink",
        "leave": {"after_step": spec.at_step, "ranks": [spec.target_rank]},
        "opted_in": any(e["ev"] == "in_place" for e in events),
        "unsupported": unsupported,
    }
