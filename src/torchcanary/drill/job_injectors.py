"""When a fault strikes a user's job: at a step some rank logs, or some seconds after launch.

Orchestrator side. The built-in job logs every step on every rank, so its injector waits for
the target rank's own step (:class:`~torchcanary.drill.faults.Injector`). A job of the
user's shows what it shows:

- most log on rank 0 only: :class:`LeadInjector` strikes the target once the rank that logs
  (the *lead*) has finished ``at_step``. Under data parallelism no rank finishes a step
  before every rank has joined its all-reduce, so the lead's step is the job's step, and a
  rank struck then never finishes the next one;
- ``kill-in-backward`` on such a job: :class:`LeadBackwardInjector` tells the armed target
  (``job_backward.py``) once the lead has finished ``at_step``, by a file it makes, and
  strikes when the target says it is inside its next backward pass;
- a job that shows no steps at all: :class:`TimedInjector` strikes after a time.

Either finds the target's process by its launch event, which the shim writes on every rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.drill.catalog import NETWORK_FAULTS
from torchcanary.drill.faults import Injector


@dataclass
class _LaunchTargeted(Injector):
    """Finds the target among the first launch's processes (its node, for a network fault)."""

    def _first_launch(self, events: list[dict[str, Any]]) -> dict[str, Any] | None:
        for event in events:
            if event["ev"] != "launch" or int(event.get("attempt", 0)) != 0:
                continue
            if self.spec.fault in NETWORK_FAULTS:
                hit = event.get("node") == str(self.spec.target_rank)
            else:
                hit = int(event["rank"]) == self.spec.target_rank
            if hit:
                return event
        return None


@dataclass
class LeadInjector(_LaunchTargeted):
    """Strikes the target once ``lead_rank`` (a rank that logs steps) finishes ``at_step``."""

    lead_rank: int = 0

    def _target(self, events: list[dict[str, Any]]) -> tuple[int, int] | None:
        reached = any(
            event["ev"] == "step"
            and int(event.get("attempt", 0)) == 0
            and int(event.get("rank", 0)) == self.lead_rank
            and int(event["step"]) >= self.spec.at_step
            for event in events
        )
        launch = self._first_launch(events) if reached else None
        return None if launch is None else (int(launch["pid"]), int(launch["rank"]))


def backward_go_file(attempt_root: Path) -> Path:
    """The file that tells an armed target the lead has reached the step (``job_backward``)."""
    return (attempt_root / "strike-in-backward").absolute()


@dataclass
class LeadBackwardInjector(Injector):
    """``kill-in-backward`` on a job whose target does not log: armed by the lead's step."""

    lead_rank: int = 0
    go_file: Path = Path()

    def _target(self, events: list[dict[str, Any]]) -> tuple[int, int] | None:
        if not self.go_file.exists() and any(
            event["ev"] == "step"
            and int(event.get("attempt", 0)) == 0
            and int(event.get("rank", 0)) == self.lead_rank
            and int(event["step"]) >= self.spec.at_step
            for event in events
        ):
            self.go_file.touch()
        return super()._target(events)  # the target's backward event


@dataclass
class TimedInjector(_LaunchTargeted):
    """Strikes ``at_s`` seconds after the target's first launch: for a job without steps."""

    at_s: float = 0.0

    def _target(self, events: list[dict[str, Any]]) -> tuple[int, int] | None:
        launch = self._first_launch(events)
        if launch is None or time.time() - float(launch["t"]) < self.at_s:
            return None
        return int(launch["pid"]), int(launch["rank"])


def timed_strike_s(
    fault_after_s: float | None, reference_run_s: float | None, drill_timeout_s: float
) -> float:
    """When a :class:`TimedInjector` strikes: the user's ``job_fault_after_s``, else half the
    fault-free run, or half the drill's bound when that is shorter (on a loaded machine the
    reference can outlast the bound, and a strike after the bound never lands)."""
    if fault_after_s:
        return fault_after_s
    return 0.5 * min(float(reference_run_s or 10.0), drill_timeout_s)
