"""From a drill's event logs to its numbers: detection, resumption, lost work, throughput.

Orchestrator side, standard library only. Every figure is derived from events the job
wrote and the moment the drill injected its fault, all on one wall clock (one machine):

- detect_s: fault -> first sign that anything noticed: a rank's error event, or failing
  that the relaunch of the job by its agent (or the launcher's exit, passed in).
- resume_s: fault -> the first training step completed after recovery.
- steps_lost: completed steps whose work was thrown away and recomputed (a step finished
  before the fault and finished again after the recovery).
- throughput: steps per second from the median step interval, before the fault and after
  the recovery (first step after a (re)start excluded: it carries startup cost).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recovery:
    detect_s: float | None
    resume_s: float | None
    last_step_before: int | None
    resume_step: int | None
    steps_lost: int | None
    throughput_before: float | None
    throughput_after: float | None


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["ev"] == "step"]


def _rate(times: list[float]) -> float | None:
    intervals = [later - earlier for earlier, later in itertools.pairwise(times) if later > earlier]
    if len(intervals) < 2:
        return None
    return 1.0 / statistics.median(intervals)


def _lowest_rank_times(steps: list[dict[str, Any]]) -> list[float]:
    if not steps:
        return []
    lowest = min(int(e["rank"]) for e in steps)
    return [float(e["t"]) for e in steps if int(e["rank"]) == lowest]


def measure(
    events: list[dict[str, Any]], fault_t: float | None, exit_t: float | None = None
) -> Recovery:
    """The recovery figures for one drill; None where the thing never happened."""
    steps = _steps(events)
    if fault_t is None:
        times = _lowest_rank_times(steps)
        return Recovery(None, None, None, None, None, _rate(times[1:]), None)
    before = [e for e in steps if e["t"] <= fault_t]
    last_before = max((int(e["step"]) for e in before), default=None)
    noticed = [float(e["t"]) for e in events if e["t"] > fault_t and e["ev"] == "error"]
    relaunched = [float(e["t"]) for e in events if e["t"] > fault_t and e["ev"] == "launch"]
    signs = noticed or relaunched or ([exit_t] if exit_t is not None else [])
    detect_t = min(signs) if signs else None
    # Resumed work: steps after the fault from a new launch or after an in-place recovery.
    recovered_t = min(
        (float(e["t"]) for e in events if e["ev"] in ("recovered", "start") and e["t"] > fault_t),
        default=None,
    )
    after = [e for e in steps if recovered_t is not None and e["t"] > recovered_t]
    resume_t = float(after[0]["t"]) if after else None
    resume_step = int(after[0]["step"]) if after else None
    lost = None
    if resume_step is not None and last_before is not None:
        lost = max(0, last_before - resume_step + 1)
    return Recovery(
        detect_s=None if detect_t is None else detect_t - fault_t,
        resume_s=None if resume_t is None else resume_t - fault_t,
        last_step_before=last_before,
        resume_step=resume_step,
        steps_lost=lost,
        throughput_before=_rate(_lowest_rank_times(before)[1:]),
        # A job that ran on through the fault (a slowed link) has no recovery point.
        throughput_after=_rate(
            _lowest_rank_times(after)[1:]
            if recovered_t is not None
            else _lowest_rank_times([e for e in steps if e["t"] > fault_t])
        ),
    )


def compact(
    events: list[dict[str, Any]], fault_t: float | None, injected: str = ""
) -> dict[str, Any]:
    """The timeline the report plots: step progress per rank and launch, and marks.

    Times are seconds since the first event, rounded, so the payload stays small.
    """
    if not events:
        return {"series": {}, "marks": []}
    origin = float(events[0]["t"])
    series: dict[str, list[list[float]]] = {}
    marks: list[dict[str, Any]] = []
    for event in events:
        at = round(float(event["t"]) - origin, 3)
        name = event.get("log", f"rank{event['rank']}").removesuffix(".jsonl")
        if event["ev"] == "step":
            series.setdefault(name, []).append([at, int(event["step"])])
        elif event["ev"] in (
            "error",
            "ckpt",
            "launch",
            "recovering",
            "recovered",
            "done",
            "unsupported",
        ):
            label = str(event.get("kind") or event.get("path") or event.get("step") or "")
            marks.append(
                {"t": at, "kind": event["ev"], "rank": event.get("rank"), "label": label[:80]}
            )
    if fault_t is not None:
        marks.append(
            {"t": round(fault_t - origin, 3), "kind": "fault", "rank": None, "label": injected[:80]}
        )
    return {"series": series, "marks": marks}
