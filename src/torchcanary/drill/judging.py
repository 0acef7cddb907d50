"""The facts and the verdict tail every built-in drill shares, on one machine or across nodes.

A drill launches and watches its own way (``drill/drill.py`` with ranks here,
``drill/node_drill.py`` with one rank per Ray node), then fills its payload with the same
facts: what was struck and how the job found and survived it (:func:`fault_facts`), and, for
a job that finished, its steps set against the fault-free run (:func:`reference_facts`).
:func:`against_reference` is the part of the judgement that follows from those facts alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchcanary.drill import trajectory
from torchcanary.drill.result import DrillVerdict
from torchcanary.drill.timeline import Recovery


def fault_facts(detail: str, struck_rank: int | None, figures: Recovery) -> dict[str, Any]:
    """What was injected and how the job recovered: the figures every drill row carries."""
    return {
        "injected": detail,
        "struck_rank": struck_rank,
        "detect_s": figures.detect_s,
        "resume_s": figures.resume_s,
        "last_step_before_fault": figures.last_step_before,
        "resume_step": figures.resume_step,
        "steps_lost": figures.steps_lost,
        "throughput_before": figures.throughput_before,
        "throughput_after": figures.throughput_after,
    }


def reference_facts(
    events: list[dict[str, Any]], reference: dict[str, Any], kept: Sequence[str]
) -> dict[str, Any]:
    """The fault-free run's ``kept`` facts and, when it finished, the step-by-step check."""
    facts: dict[str, Any] = {
        "reference": {key: reference.get(key) for key in kept},
        "reference_loss": reference.get("final_loss"),
    }
    if reference.get("ok"):
        rows = trajectory.step_differences(events, reference.get("steps") or [])
        facts["step_diffs"] = rows
        facts["step_check"] = trajectory.summary(rows, trajectory.LOSS_RTOL)
    return facts


def against_reference(
    payload: dict[str, Any], replicas: str = "replicas"
) -> tuple[DrillVerdict, str] | None:
    """Why a job that finished after its fault does not match the fault-free run, or None.

    ``replicas`` names the ranks in the reason ("replicas on the nodes").
    """
    reference = payload.get("reference") or {}
    if not reference.get("ok"):
        return DrillVerdict.ERROR, f"no fault-free reference: {reference.get('reason')}"
    if not payload["params_identical"]:
        return DrillVerdict.FAILED, f"{replicas} finished with different parameters"
    check = payload["step_check"]
    if check["first_difference"] is not None:
        return DrillVerdict.FAILED, trajectory.describe(check)
    return None
