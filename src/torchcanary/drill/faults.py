"""Injecting the fault: watch the target rank's events, strike once it finishes a step
(or, for ``kill-in-backward``, once the armed rank says it is inside its backward pass).

Orchestrator side. The job pads each step with a short sleep, so the fault lands just
after the chosen step: a killed or stopped rank never starts the next one, and its peers
are left waiting in that step's gradient all-reduce.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from torchcanary.drill.catalog import NETWORK_FAULTS, DrillSpec
from torchcanary.drill.netns import RankNetwork


@dataclass
class Injector:
    """Strikes ``spec.fault`` at ``spec.target_rank`` once it logs step ``spec.at_step``."""

    spec: DrillSpec
    network: RankNetwork | None = None
    store_host: subprocess.Popen[bytes] | None = None
    fault_t: float | None = None
    detail: str = ""
    stopped_pid: int | None = None
    struck_rank: int | None = None
    _released: bool = field(default=False, repr=False)

    def _target(self, events: list[dict[str, Any]]) -> tuple[int, int] | None:
        """(pid, rank) of the target once it has finished the chosen step.

        A network fault hits a namespace, and under torchrun's rendezvous the rank that
        runs in it is assigned at start, so there the target is found by its node label.
        """
        nodes = {e["pid"]: e.get("node") for e in events if e["ev"] == "launch"}
        if self.spec.fault == "kill-in-backward":  # the armed rank says it is in backward
            return next(
                (
                    (int(e["pid"]), int(e["rank"]))
                    for e in events
                    if e["ev"] == "backward" and int(e["rank"]) == self.spec.target_rank
                ),
                None,
            )
        for event in events:
            if (
                event["ev"] != "step"
                or int(event.get("attempt", 0)) != 0
                or "join" in event["log"]
                or int(event["step"]) < self.spec.at_step
            ):
                continue
            if self.spec.fault in NETWORK_FAULTS:
                hit = nodes.get(event["pid"]) == str(self.spec.target_rank)
            else:
                hit = int(event["rank"]) == self.spec.target_rank
            if hit:
                return int(event["pid"]), int(event["rank"])
        return None

    def poll(self, events: list[dict[str, Any]]) -> bool:
        """Inject if the moment has come; True once the fault has been injected."""
        if self.fault_t is not None:
            return True
        target = self._target(events)
        if target is None:
            return False
        pid, self.struck_rank = target
        fault = self.spec.fault
        self.fault_t = time.time()
        if fault == "kill":
            os.kill(pid, signal.SIGKILL)
            self.detail = f"SIGKILL to rank {self.spec.target_rank} (pid {pid})"
        elif fault == "kill-in-backward":
            os.kill(pid, signal.SIGKILL)
            self.detail = (
                f"SIGKILL to rank {self.spec.target_rank} (pid {pid}) inside its backward pass"
            )
        elif fault == "hang":
            os.kill(pid, signal.SIGSTOP)
            self.stopped_pid = pid
            self.detail = f"SIGSTOP to rank {self.spec.target_rank} (pid {pid})"
        elif fault == "net-down":
            assert self.network is not None
            self.network.cut(self.spec.target_rank)
            self.detail = f"link of rank {self.spec.target_rank}'s namespace set down"
        elif fault == "net-slow":
            assert self.network is not None
            self.network.slow(self.spec.target_rank, self.spec.net_rate)
            self.detail = (
                f"rank {self.spec.target_rank}'s link limited to {self.spec.net_rate} (tc tbf)"
            )
        elif fault == "store-kill":
            assert self.store_host is not None
            self.store_host.kill()
            self.detail = f"SIGKILL to the store host (pid {self.store_host.pid})"
        return True

    def release(self) -> None:
        """Let a stopped rank run again (SIGCONT) so it can report and dump; once."""
        if self.stopped_pid is not None and not self._released:
            self._released = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.stopped_pid, signal.SIGCONT)
