"""The drilled job against the fault-free one, step by step: loss and gradient norm.

Orchestrator side, standard library only. Every step the job recorded is compared with the
same step of the fault-free reference (same seed, same mode): every rank's record and every
launch's, so a step that was redone after a restart is checked each time it ran. A wrong
step that later steps wash out is still a wrong step, so the verdict rests on the first and
the worst step, not only on the final loss.

``LOSS_RTOL`` is the drills' one tolerance: the runner's verdict and the policy's default
(``drill_loss_rtol`` in :mod:`torchcanary.drill.section`) both read it from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

LOSS_RTOL = 1e-4  # relative; steps that should be bit-identical rarely differ by 1e-7


def figure(value: Any) -> float:
    """A recorded figure as a float; anything missing or not a number counts as NaN."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan


def relative_difference(value: Any, reference: Any) -> float:
    """|value - reference| / |reference|; infinite when either is not a finite number."""
    got, want = figure(value), figure(reference)
    if not (math.isfinite(got) and math.isfinite(want)):
        return math.inf
    return abs(got - want) / abs(want) if want else abs(got - want)


def step_records(events: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Every recorded step, by step number: loss, gradient norm, rank and launch."""
    records: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if event.get("ev") != "step":
            continue
        records.setdefault(int(event["step"]), []).append(
            {
                "loss": event.get("loss"),
                "grad_norm": event.get("grad_norm"),
                "rank": event.get("rank"),
                "attempt": event.get("attempt", 0),
            }
        )
    return records


def reference_steps(events: Iterable[dict[str, Any]]) -> list[list[Any]]:
    """The fault-free trajectory as ``[step, loss, grad_norm]`` rows (first record each)."""
    records = step_records(events)
    return [
        [step, records[step][0]["loss"], records[step][0]["grad_norm"]] for step in sorted(records)
    ]


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def step_differences(
    events: Iterable[dict[str, Any]], reference: list[list[Any]]
) -> list[dict[str, Any]]:
    """Per reference step: the drilled job's worst record against the reference.

    ``loss_rdiff`` and ``grad_rdiff`` are relative differences (None: not a finite number,
    which counts as off); ``runs`` is how many records the step has (0: it never ran).
    """
    records = step_records(events)
    rows = []
    for step, ref_loss, ref_grad in reference:
        found = records.get(int(step), [])
        row: dict[str, Any] = {"step": int(step), "runs": len(found), "ref_loss": ref_loss}
        row["ref_grad_norm"] = ref_grad
        if found:
            worst = max(
                found,
                key=lambda r: max(
                    relative_difference(r["loss"], ref_loss),
                    relative_difference(r["grad_norm"], ref_grad),
                ),
            )
            row["loss"] = worst["loss"]
            row["grad_norm"] = worst["grad_norm"]
            row["loss_rdiff"] = _finite_or_none(relative_difference(worst["loss"], ref_loss))
            row["grad_rdiff"] = _finite_or_none(relative_difference(worst["grad_norm"], ref_grad))
            row["attempt"] = worst["attempt"]
        rows.append(row)
    return rows


def _off(rdiff: Any, rtol: float) -> bool:
    return not isinstance(rdiff, (int, float)) or not rdiff <= rtol


def first_divergence(rows: list[dict[str, Any]], rtol: float) -> dict[str, Any] | None:
    """The first step that never ran or whose loss or gradient norm is off by over ``rtol``."""
    for row in rows:
        if not row.get("runs"):
            return row
        if _off(row.get("loss_rdiff"), rtol) or _off(row.get("grad_rdiff"), rtol):
            return row
    return None


def _worst(rows: list[dict[str, Any]], field: str) -> float | None:
    values = [row.get(field) for row in rows if row.get("runs")]
    if any(not isinstance(v, (int, float)) for v in values):
        return None  # a non-finite figure: reported through first_divergence
    return max((float(v) for v in values if isinstance(v, (int, float))), default=0.0)


def summary(rows: list[dict[str, Any]], rtol: float) -> dict[str, Any]:
    """The comparison in a few figures, for the payload and the report."""
    divergence = first_divergence(rows, rtol)
    exact = next(
        (
            r["step"]
            for r in rows
            if r.get("runs") and (r.get("loss_rdiff"), r.get("grad_rdiff")) != (0.0, 0.0)
        ),
        None,
    )
    return {
        "rtol": rtol,
        "steps_compared": sum(1 for r in rows if r.get("runs")),
        "steps_missing": [r["step"] for r in rows if not r.get("runs")],
        "first_differing_step": None if divergence is None else divergence["step"],
        "first_difference": divergence,
        "first_inexact_step": exact,
        "max_loss_rdiff": _worst(rows, "loss_rdiff"),
        "max_grad_rdiff": _worst(rows, "grad_rdiff"),
    }


def describe(check: dict[str, Any]) -> str:
    """One line for a person: every step within tolerance, or the first that is not."""
    first = check.get("first_difference")
    rtol = check.get("rtol", LOSS_RTOL)
    if first is None:
        worst = max(check.get("max_loss_rdiff") or 0.0, check.get("max_grad_rdiff") or 0.0)
        return (
            f"all {check.get('steps_compared')} steps match the fault-free run "
            f"(worst relative difference {worst:.1e}, tolerance {rtol:g})"
        )
    if not first.get("runs"):
        return f"step {first['step']} never ran"
    return (
        f"step {first['step']} differs from the fault-free run: loss {first.get('loss')} vs "
        f"{first.get('ref_loss')} (relative {_text(first.get('loss_rdiff'))}), gradient norm "
        f"{first.get('grad_norm')} vs {first.get('ref_grad_norm')} "
        f"(relative {_text(first.get('grad_rdiff'))}); tolerance {rtol:g}"
    )


def _text(rdiff: Any) -> str:
    return f"{rdiff:.1e}" if isinstance(rdiff, (int, float)) else "not a number"
