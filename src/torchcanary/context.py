"""What every section of a run is handed: the run, its store, its environments, workers.

Sections (every registered one, see ``sections.py``) are independent; each reads the plan,
does its work through workers or subprocesses, and commits each finished unit to the store
at once so ``--resume`` can skip it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchcanary.envs.cache import Environment
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.section_types import Finding, RunView
from torchcanary.store.base import ResultStore

ROLES = ("baseline", "candidate")


@dataclass
class RunContext:
    run_id: str
    store: ResultStore
    plan: RunPlan
    environments: dict[str, Environment]
    import_root: Path
    work_dir: Path
    progress: Progress
    resume: bool = False
    # The hardware profile of the fleet node this runs on; "" on the user's machine. Kept
    # results are keyed by it, so one profile never answers for another.
    profile: str = ""
    # The run so far as the core reads it: its view, and every section's findings in it
    # (each through its part of the contract). What the explain section works from, so it
    # never reads the registry or another section; None where nobody set it.
    run_so_far: Callable[[], tuple[RunView, list[Finding]]] | None = None
    # When this invocation started (``time.monotonic``): a resumed run's own time is counted
    # from here, not from when the run was first created (the explain section's budget).
    started: float = field(default_factory=time.monotonic)
    _workers: list[WorkerProcess] = field(default_factory=list)

    def new_worker(
        self, role: str, env_vars: dict[str, str] | None = None, cwd: str | None = None
    ) -> WorkerProcess:
        """A fresh worker in ``role``'s environment, closed when the run ends."""
        worker = WorkerProcess(
            self.environments[role].python, self.import_root, env_vars=dict(env_vars or {}), cwd=cwd
        )
        self._workers.append(worker)
        return worker

    def close_workers(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers.clear()
