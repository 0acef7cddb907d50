"""A user's job against its own fault-free run: the loss of every step it reported.

Orchestrator side, standard library only. The built-in job records a loss and a gradient
norm per step (``trajectory.py``); a job of the user's reports what it reports, through
``report_step`` or a printed line, often only a loss, sometimes no step at all. So this
compares losses only: every record of every rank and launch (a step redone after a restart
is checked each time it ran) against the fault-free run's, within a relative tolerance:
``trajectory.LOSS_RTOL`` for a job that is deterministic, the user's ``job_rtol`` for one
that is not.
"""

from __future__ import annotations

from typing import Any

from torchcanary.drill.trajectory import relative_difference


def job_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's step events: its own reports when it makes any, else its printed lines."""
    steps = [e for e in events if e["ev"] == "step"]
    reported = [e for e in steps if e.get("source") == "helper"]
    return reported or steps


def with_job_steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with the printed-line steps dropped when the job reports its own."""
    kept = {id(e) for e in job_steps(events)}
    return [e for e in events if e["ev"] != "step" or id(e) in kept]


def step_source(events: list[dict[str, Any]]) -> str | None:
    """How the job's steps were seen: "report_step", "log lines", or None (not at all)."""
    steps = job_steps(events)
    if not steps:
        return None
    return "report_step" if steps[0].get("source") == "helper" else "log lines"


def reference_rows(events: list[dict[str, Any]]) -> list[list[Any]]:
    """The fault-free run as ``[step, rank, loss]`` rows, one per step and rank (ranks may
    report different losses: a local one each, as printed lines often are)."""
    first: dict[tuple[int, int], dict[str, Any]] = {}
    for event in job_steps(events):
        first.setdefault((int(event["step"]), int(event.get("rank", 0))), event)
    return [[step, rank, first[step, rank].get("loss")] for step, rank in sorted(first)]


def last_step_and_loss(rows: list[list[Any]]) -> tuple[int | None, Any]:
    """Where a reference ends: its last step and the lowest rank's loss there."""
    if not rows:
        return None, None
    top = max(int(row[0]) for row in rows)
    return top, min((row for row in rows if row[0] == top), key=lambda row: int(row[1]))[2]


def final_step_and_loss(events: list[dict[str, Any]]) -> tuple[int | None, Any]:
    """Where the last launch ended: its highest step and that step's loss (lowest rank)."""
    steps = job_steps(events)
    if not steps:
        return None, None
    last_attempt = max(int(e.get("attempt", 0)) for e in steps)
    last = [e for e in steps if int(e.get("attempt", 0)) == last_attempt]
    top = max(int(e["step"]) for e in last)
    at_top = sorted((e for e in last if int(e["step"]) == top), key=lambda e: int(e["rank"]))
    return top, at_top[0].get("loss")


def compare(
    events: list[dict[str, Any]], reference: list[list[Any]], rtol: float
) -> dict[str, Any]:
    """Every reported step against the reference; the first step off, or that never ran."""
    records: dict[tuple[int, int], list[Any]] = {}
    for event in job_steps(events):
        records.setdefault((int(event["step"]), int(event.get("rank", 0))), []).append(
            event.get("loss")
        )
    expected: dict[int, list[tuple[int, Any]]] = {}
    for step, rank, ref_loss in reference:
        expected.setdefault(int(step), []).append((int(rank), ref_loss))
    rows = []
    for step, ranks in sorted(expected.items()):
        row: dict[str, Any] = {"step": step, "runs": 0, "loss": None, "ref_loss": None}
        row["loss_rdiff"] = None
        worst = -1.0
        for rank, ref_loss in ranks:
            losses = records.get((step, rank), [])
            if not losses:  # this rank never ran the step: the step did not run whole
                row["runs"] = 0
                break
            row["runs"] += len(losses)
            for loss in losses:
                rdiff = 0.0 if ref_loss is None else relative_difference(loss, ref_loss)
                if rdiff > worst:
                    worst = rdiff
                    row.update(loss=loss, ref_loss=ref_loss)
        if row["runs"]:
            row["loss_rdiff"] = worst if worst != float("inf") else None
        rows.append(row)
    first = next(
        (r for r in rows if not r["runs"] or r["loss_rdiff"] is None or r["loss_rdiff"] > rtol),
        None,
    )
    compared = [r for r in rows if r["runs"]]
    return {
        "rtol": rtol,
        "steps_compared": len(compared),
        "steps_missing": [r["step"] for r in rows if not r["runs"]],
        "first_differing_step": None if first is None else first["step"],
        "first_difference": first,
        "first_inexact_step": next((r["step"] for r in compared if r["loss_rdiff"] != 0.0), None),
        "max_loss_rdiff": max((r["loss_rdiff"] or 0.0 for r in compared), default=0.0),
        "rows": rows,
    }


def describe(check: dict[str, Any]) -> str:
    """One line: every reported step within tolerance, or the first that is not."""
    first, rtol = check["first_difference"], check["rtol"]
    if first is None:
        return (
            f"all {check['steps_compared']} reported steps match the fault-free run's loss "
            f"(worst relative difference {check['max_loss_rdiff']:.1e}, tolerance {rtol:g})"
        )
    if not first["runs"]:
        return f"step {first['step']} of the fault-free run never ran"
    return (
        f"step {first['step']} differs from the fault-free run: loss {first['loss']} vs "
        f"{first['ref_loss']} (relative "
        f"{'not a number' if first['loss_rdiff'] is None else format(first['loss_rdiff'], '.1e')}"
        f"); tolerance {rtol:g}"
    )
