"""The drill section's part of ``torchcanary repro``: each drill that passed in the
baseline and failed in the candidate, with what a standalone script needs to run it again
as the drill did: the job (its command, folder and variables), the fault and when it
struck, the torchrun line's options and variables, and each version's fault-free run (its
last step and loss) to judge the job's end against."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from torchcanary.drill.catalog import RESTARTS, DrillSpec
from torchcanary.drill.drill import MAX_RESTARTS
from torchcanary.drill.launch import launch_variables, standalone_torchrun
from torchcanary.drill.result import DrillRun, DrillVerdict, from_rows
from torchcanary.drill.settings import DrillSettings
from torchcanary.section_types import Finding, RunView

SECTION = "drill"
KIND = "fault"  # the repro writer that reads these findings
_SPEC_FIELDS = frozenset(field.name for field in dataclasses.fields(DrillSpec))


def _side(run: DrillRun, view: RunView) -> dict[str, Any]:
    reference = run.reference or {}
    environment = view.environments.get(run.env_role)
    return {
        "torch": environment.torch_version if environment is not None else None,
        "verdict": run.verdict.value,
        "reason": run.reason_text,
        "final_step": reference.get("final_step"),
        "reference_loss": reference.get("final_loss"),
    }


def _job(settings: DrillSettings) -> dict[str, Any] | None:
    """The user's job as the run ran it; None for the built-in one."""
    job = settings.user_job()
    if job is None:
        return None
    return {
        "argv": list(job.argv),
        "cwd": job.cwd,
        "env": dict(job.env),
        "with": list(job.with_),
        "files": [str(path) for path in job.files()],
        "step_pattern": job.step_pattern,
        "rtol": job.tolerance,
    }


def _launch(spec: DrillSpec) -> dict[str, Any]:
    restarts = MAX_RESTARTS if spec.recovery in RESTARTS else 0
    return {
        "torchrun": shlex.join(standalone_torchrun(spec.ranks, restarts)),
        "env": launch_variables(spec),
    }


def _regressed(view: RunView) -> list[tuple[DrillRun, DrillRun, DrillSpec]]:
    """(baseline, candidate, spec) of each drill that passed in the baseline and failed in
    the candidate."""
    runs = [r for r in from_rows(view.sections.get(SECTION, [])) if isinstance(r, DrillRun)]
    by_role = {(run.key, run.env_role): run for run in runs}
    found = []
    for (key, role), candidate in by_role.items():
        baseline = by_role.get((key, "baseline"))
        if (
            role == "candidate"
            and candidate.verdict is DrillVerdict.FAILED
            and baseline is not None
            and baseline.verdict is DrillVerdict.PASSED
            and baseline.spec is not None
        ):
            # a row stored by another version may name fields this DrillSpec lacks
            kept = {k: v for k, v in baseline.spec.items() if k in _SPEC_FIELDS}
            found.append((baseline, candidate, DrillSpec(**kept)))
    return found


def reproducible(view: RunView) -> list[Finding]:
    """Every drill that passed in the baseline and failed in the candidate."""
    pairs = _regressed(view)
    if not pairs:
        return []
    settings = DrillSettings.from_json(view.run.plan.get("settings", {}).get(SECTION, {}))
    found = []
    for baseline, candidate, spec in pairs:
        found.append(
            Finding(
                section=SECTION,
                item=baseline.key,
                kind=KIND,
                delta=f"{baseline.verdict} -> {candidate.verdict}",
                facts={
                    "spec": spec.to_json(),
                    "job": _job(settings),
                    "launch": _launch(spec),
                    "baseline": _side(baseline, view),
                    "candidate": _side(candidate, view),
                },
            )
        )
    return found
