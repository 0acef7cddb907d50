"""When a fault strikes a user's job: at a step some rank logs, or some seconds after launch.

Orchestrator side. The built-in job logs every step on every rank, so its injector waits for
the target rank's own step (:class:`~torchcanary.drill.faults.Injector`). A job of the
user's shows what it shows:

- most log on rank 0 only: :class:`LeadInjector` strikes the target once the rank that logs
  (the *lead*) has finished ``at_step``. Under data parallelism no rank finishes a step
  before every rank has joined its all-reduce, so the lead's step is the job's step, and a
  rank struck then never finishes the next one;
- a job that shows no steps at all: :class:`TimedInjector` strikes after a time.

Either finds the target's process by its launch event, which the shim writes on every rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


@dataclass
class TimedInjector(_LaunchTargeted):
    """Strikes ``at_s`` seconds after the target's first launch: for a job without steps."""

    at_s: float = 0.0

    def _target(self, events: list[dict[str, Any]]) -> tuple[int, int] | None:
        launch = self._first_launch(events)
        if launch is None or time.time() - float(launch["t"]) < self.at_s:
            return None
        return int(launch["pid"]), int(launch["rank"])
