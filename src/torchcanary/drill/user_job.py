"""Drills on the user's own training script, launched the way they launch it.

Orchestrator side. ``[drill] job = "train.py --config small.yaml"`` (or ``--job``) swaps the
built-in tiny GPT for the user's script; everything else is the built-in drills' machinery
(:class:`~torchcanary.drill.drill.DrillRunner`): the same faults and injector, torchrun
restarts, namespaces, bounds and cleanup by token. What differs is only what a job we did
not write lets us see, the contract in ``docs/drills.md``:

- unchanged, it is started by torchrun (``--nproc-per-node`` = ``ranks``) through a shim
  (:mod:`torchcanary.worker.drill.job_shim`) that notes each launch, turns printed lines that
  match ``job_step_pattern`` into steps, and records an exception that escapes the job;
- with ``report_step(step, loss=...)`` it reports its exact steps itself;
- for ``shrink`` and ``reconfigure`` it is started as plain ranks sharing the drill's store
  and recovers in place itself, taking part through ``job_inplace.py``'s contract; a job
  that does not take part, or says it cannot, makes that path absent. A shrink is compared
  with a fault-free run whose world shrinks at the same step (``job_leave.py``).

The fault strikes after step ``at_step`` when the fault-free run showed steps (as the
lowest rank that logs them saw it, when not every rank does), else
``job_fault_after_s`` seconds after launch (default: half the fault-free run's time, or
of the drill's bound when shorter). The fault-free run is made first in each environment
and kept for every drill of the job (and on disk, ``kept_references.py``, for later runs);
``{scratch}`` in the job's arguments becomes a fresh folder per run, so its checkpoints
never leak from one run into another.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary import kept
from torchcanary.drill.trajectory import LOSS_RTOL

PATTERN_VARIABLE = "TORCHCANARY_DRILL_STEP_PATTERN"  # read by the shim (job_shim.py)
SCRATCH_VARIABLE = "TORCHCANARY_DRILL_SCRATCH"
CWD_VARIABLE = "TORCHCANARY_DRILL_JOB_CWD"  # read by the shim: the job starts there
IN_PLACE = ("shrink", "reconfigure")  # recovered inside the job, by the job_inplace contract
DEFAULT_STEP_PATTERN = (
    r"\bstep\W+(?P<step>\d+)\b(?:.*?\bloss\W+(?P<loss>[-+]?[0-9.]+(?:e[-+]?\d+)?))?"
)


@dataclass(frozen=True)
class UserJob:
    """The user's job as the drill runs it; ``argv`` is the script (or ``-m module``) and args."""

    argv: tuple[str, ...]
    with_: tuple[str, ...] = ()
    step_pattern: str = DEFAULT_STEP_PATTERN
    rtol: float | None = None  # None: a deterministic job, compared at LOSS_RTOL
    fault_after_s: float | None = None
    cwd: str = "."  # where the job starts; its relative paths (script, files, --with) read here
    env: tuple[tuple[str, str], ...] = ()  # job_env, sorted by name

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    @property
    def tolerance(self) -> float:
        return LOSS_RTOL if self.rtol is None else self.rtol

    def comparison(self) -> str:
        """How the job's steps are compared, in words the report shows."""
        if self.rtol is None:
            return f"as a deterministic job (relative tolerance {LOSS_RTOL:g})"
        return f"as a non-deterministic job, within the tolerance you set (job_rtol {self.rtol:g})"

    def argv_for(self, scratch: Path) -> list[str]:
        return [arg.replace("{scratch}", str(scratch)) for arg in self.argv]

    def files(self) -> list[Path]:
        """The job's own files, whose content decides its fault-free run: the script (or
        the ``-m`` module under ``cwd``), every argument naming a file, local ``job_with``
        projects. Folders given as arguments (data) are known by name only."""
        here = Path(self.cwd)
        found: list[Path] = []
        if self.argv[0] == "-m":
            module = here / Path(*self.argv[1].split("."))
            found += [p for p in (module.with_suffix(".py"), module) if p.exists()]
            args = self.argv[2:]
        else:
            found.append(here / self.argv[0])
            args = self.argv[1:]
        for arg in args:
            if "{scratch}" in arg:
                continue
            for candidate in {arg, arg.partition("=")[2]} - {""}:
                with contextlib.suppress(OSError, ValueError):
                    if (here / candidate).is_file():
                        found.append(here / candidate)
        for requirement in self.with_:
            local = re.sub(r"^(-e|--editable)\s*", "", requirement.strip())
            with contextlib.suppress(OSError, ValueError):
                if local and (here / local).exists():
                    found.append(here / local)
        return found

    def identity(self, environment: str, ranks: int) -> dict[str, Any]:
        """Everything the job's fault-free run depends on, as the reference cache keys it."""
        return {
            "environment": environment,
            "argv": list(self.argv),
            "cwd": str(Path(self.cwd).resolve()),
            "env": [list(pair) for pair in self.env],
            "with": list(self.with_),
            "files": kept.files_digest(self.files()),
            "ranks": ranks,
            "step_pattern": self.step_pattern,
            "rtol": self.rtol,
        }
