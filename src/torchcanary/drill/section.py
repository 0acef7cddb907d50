"""The drill section: fault drills on a small real training job, in both environments.

Each drill (``fault:recovery``, see :mod:`torchcanary.drill.catalog`) runs once per
environment and is stored at once as its typed record (``drill/result.py``:
``DrillRun``, key ``<drill>``, env_role ``<role>``, verdict a ``DrillVerdict``); the
fault-free runs the drills were compared against are stored as ``DrillReference`` rows
keyed ``reference:<mode>``. The policy and the report read these records' fields.

Settings, ``[tool.torchcanary.drill]``: ``drill/settings.py``.

Policy keys for :func:`blocking_reasons` (defaults in brackets):
- ``drill_block_on_regression`` [true]: a drill that passed in the baseline but not in the
  candidate blocks, when its trials support the difference (all of the baseline's passed,
  none of the candidate's: ``repeats.compare``);
- ``drill_block_on_wrong_result`` [true]: a candidate drill whose job finished with
  replicas that differ, with a step whose loss or gradient norm is off the fault-free run's
  by more than ``drill_loss_rtol`` (relative; default ``trajectory.LOSS_RTOL``, 1e-4), or
  with a final loss off by as much, blocks, whatever the baseline did;
- ``drill_max_slowdown`` [3.0] and ``drill_slowdown_floor_s`` [5.0]: the candidate's
  detect_s or resume_s above that many times the baseline's and at least that many seconds
  later blocks;
- ``drill_block_on_flight_recorder`` [false]: the Flight Recorder named the culprit in the
  baseline but not in the candidate.
The numbers' ranges are declared in POLICY_BOUNDS (a tolerance from 0 to 1, a slowdown
factor of at least 1, seconds of at least 0); a policy outside them is refused at load.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torchcanary.context import ROLES, RunContext
from torchcanary.drill import repeats, trajectory
from torchcanary.drill import settings as drill_settings
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.drill import DrillOutcome, DrillRunner
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.result import (
    REFERENCE_PREFIX,
    DrillRecord,
    DrillRun,
    DrillVerdict,
    drill_record,
    from_json,
    from_rows,
)
from torchcanary.drill.settings import DrillSettings
from torchcanary.drill.user_runner import UserJobRunner
from torchcanary.envs.cache import cache_root
from torchcanary.plan import RunPlan
from torchcanary.section_types import PlannedUnit, PolicyBounds, RunView, UnitOutcome
from torchcanary.store.rows import SectionResult

SECTION = "drill"
# A trial checked the drill when it ran to a verdict on the recovery, or found the fault
# cannot be injected on this machine; an error (the fault never injected, the job never
# started, our own code raised) is not a trial that ran.
CHECKED_VERDICTS = frozenset(
    verdict.value
    for verdict in (
        DrillVerdict.PASSED,
        DrillVerdict.FAILED,
        DrillVerdict.ABSENT,
        DrillVerdict.NOT_CHECKABLE,
    )
)

POLICY_DEFAULTS: dict[str, Any] = {
    "drill_block_on_regression": True,
    "drill_block_on_wrong_result": True,
    "drill_loss_rtol": trajectory.LOSS_RTOL,
    "drill_max_slowdown": 3.0,
    "drill_slowdown_floor_s": 5.0,
    "drill_block_on_flight_recorder": False,
}
# Numbers a policy may set, refused at load when outside.
POLICY_BOUNDS: dict[str, PolicyBounds] = {
    "drill_loss_rtol": PolicyBounds(0.0, 1.0, "a relative tolerance: 1e-4 is 0.01%"),
    "drill_max_slowdown": PolicyBounds(1.0, None, "a factor on the baseline's time: 3.0 is 3x"),
    "drill_slowdown_floor_s": PolicyBounds(0.0, None, "seconds"),
}


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The drill table validated, defaults filled in, as the plan stores it
    (``drill/settings.py``: ``DrillSettings``)."""
    return drill_settings.parse_settings(mapping).to_json()


def run(ctx: RunContext) -> None:
    """Run every configured drill in each environment, repeating it where the environments
    disagree (``drill/repeats.py``), committing each drill as its trials finish."""
    settings = drill_settings.parse_settings(ctx.plan.section_settings(SECTION))
    specs = settings.specs()
    roles = [role for role in ROLES if role in ctx.environments]
    done = ctx.store.done_section_keys(ctx.run_id, SECTION) if ctx.resume else set()
    stored = _stored_trials(ctx) if ctx.resume else {}
    job = settings.user_job()
    runners: dict[str, DrillRunner] = {}
    cache = KeptReferences(cache_root() / "drill-references", ctx.progress.note)
    for role in roles:
        env, work = ctx.environments[role], ctx.work_dir / "drills" / role
        keeping: dict[str, Any] = {
            "cache": cache,
            # the companions paired into the job's overlay are part of what it runs on
            "environment_key": f"{env.path}|{env.python}|{env.torch_version}|{env.spec.text}"
            + "".join(f"|{companion.pin}" for companion in env.companions),
            "fresh_reference": settings.job_fresh_reference,
        }
        runners[role] = (
            DrillRunner(env.python, ctx.import_root, work, **keeping)
            if job is None
            else UserJobRunner(
                env.python,
                env.path,
                ctx.import_root,
                work,
                job,
                **keeping,
                companions=env.companions,
            )
        )
    turns = _turns(specs) if job is None else [[spec] for spec in specs]
    with (
        ctx.progress.task("fault drills", total=len(specs) * len(roles)) as task,
        ThreadPoolExecutor(max_workers=len(roles) * max(map(len, turns))) as pool,
    ):
        # Turn by turn, so a cut-short run still compares; the environments' runs of a
        # turn at once: a drill mostly waits (timeouts, restarts, padded steps), and two
        # runs that share the machine's conditions make fairer detect and resume times.
        # The store and the progress stay on this thread.
        for turn in turns:
            running = {}
            for spec in turn:
                for role in roles:
                    if (spec.key, role) in done:
                        task.advance(f"{role} {spec.key}: already stored")
                    else:
                        running[spec, role] = pool.submit(_run_one, runners[role], spec)
            firsts = {key: future.result() for key, future in running.items()}
            for spec in turn:
                trials = {role: [firsts[spec, role]] for role in roles if (spec, role) in firsts}
                earlier = {
                    role: stored[spec.key, role] for role in roles if (spec.key, role) in stored
                }
                repeat = _Repeat(spec, settings, pool, runners, ctx.progress.note)
                repeat.until_enough(trials, earlier)
                for role, outcomes in trials.items():
                    outcome = repeats.combine(outcomes)
                    record = drill_record(spec.key, role, outcome.verdict, outcome.payload)
                    ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))
                    task.advance(f"{role} {spec.key}: {_verdict_text(record)}")
    for role, runner in runners.items():
        for reference in runner.references():
            verdict = DrillVerdict.PASSED if reference.get("ok") else DrillVerdict.FAILED
            key = f"{REFERENCE_PREFIX}{reference.get('parallel')}"
            record = drill_record(key, role, verdict, reference)
            ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))


def _turns(specs: list[DrillSpec]) -> list[list[DrillSpec]]:
    """The built-in job's drills in turns: a drill that only waits for its fault to surface
    (recovery "timeout": its ranks sit stopped or blocked until the process group's timeout)
    shares a turn with a drill that works, which gets the idle machine. A user's job runs
    alone: it may hold resources (ports, files, devices) that two copies of it would fight
    over."""
    waiting = [spec for spec in specs if spec.recovery == "timeout"]
    working = [spec for spec in specs if spec.recovery != "timeout"]
    turns = [[*waiting[i : i + 1], spec] for i, spec in enumerate(working)]
    return turns + [[spec] for spec in waiting[len(working) :]]


def _stored_trials(ctx: RunContext) -> dict[tuple[str, str], list[DrillVerdict]]:
    """The trials' verdicts of each drill a resumed run already stored, by key and role."""
    verdicts = {}
    for row in ctx.store.section_results(ctx.run_id, SECTION):
        record: DrillRecord = from_json(row.to_json())
        if isinstance(record, DrillRun):
            trials = record.trials or ({"verdict": record.verdict.value},)
            verdicts[record.key, record.env_role] = [DrillVerdict(t["verdict"]) for t in trials]
    return verdicts


def _verdict_text(record: DrillRecord) -> str:
    """A drill's verdict for a progress line, with its trials when there were several."""
    if isinstance(record, DrillRun) and record.trial_count > 1:
        return f"{record.verdict} ({record.trials_passed} of {record.trial_count} trials passed)"
    return record.verdict.value


class _Repeat:
    """Runs one drill again in each environment until it has its trials (drill/repeats.py):
    ``trials`` each, and ``disagreement_trials`` each where the environments disagree. The
    environments' trials run at once, as their first ones did; one trial at a time in each."""

    def __init__(
        self,
        spec: DrillSpec,
        settings: DrillSettings,
        pool: ThreadPoolExecutor,
        runners: Mapping[str, DrillRunner],
        note: Callable[[str], None],
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.pool = pool
        self.runners = runners
        self.note = note

    def until_enough(
        self, trials: dict[str, list[DrillOutcome]], earlier: Mapping[str, list[DrillVerdict]]
    ) -> None:
        """Add trials to ``trials`` (role: outcomes so far); ``earlier`` holds the verdicts
        of an environment a resumed run stored before, which gets no more trials."""
        self._run_until(trials, self.settings.trials)
        verdicts = {role: [o.verdict for o in outcomes] for role, outcomes in trials.items()}
        verdicts.update(earlier)
        if len(verdicts) < 2 or not repeats.disagree(*verdicts.values()):
            return
        wanted = max(self.settings.trials, self.settings.disagreement_trials)
        if all(len(outcomes) >= wanted for outcomes in trials.values()):
            return
        seen = ", ".join(
            f"{'/'.join(sorted({v.value for v in found}))} in the {role}"
            for role, found in sorted(verdicts.items())
        )
        self.note(
            f"{self.spec.key}: {seen}; {wanted} trials in each environment, to tell a "
            "version difference from luck"
        )
        self._run_until(trials, wanted)

    def _run_until(self, trials: dict[str, list[DrillOutcome]], wanted: int) -> None:
        while any(len(outcomes) < wanted for outcomes in trials.values()):
            round_ = {
                role: self.pool.submit(_run_one, self.runners[role], self.spec)
                for role, outcomes in trials.items()
                if len(outcomes) < wanted
            }
            for role, future in round_.items():
                trials[role].append(future.result())
                verdict = trials[role][-1].verdict
                self.note(f"  {role} {self.spec.key}: trial {len(trials[role])}: {verdict}")


def _run_one(runner: DrillRunner, spec: DrillSpec) -> DrillOutcome:
    """A drill whose harness raises is recorded as an error; the section goes on."""
    try:
        return runner.run(spec)
    except Exception as exc:
        return DrillOutcome(
            DrillVerdict.ERROR,
            {
                "reason": f"drill harness raised {type(exc).__name__}: {exc}"[:600],
                "traceback": traceback.format_exc()[-3000:],
                "spec": spec.to_json(),
            },
        )


def drill_runs(view: Any) -> list[DrillRun]:
    """The drill rows of ``view`` as records, the fault-free reference runs left out."""
    return [r for r in from_rows(view.sections.get(SECTION, [])) if isinstance(r, DrillRun)]


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """Each configured drill's trials in each environment (more trials may follow where
    the environments disagree; those are not planned)."""
    settings = drill_settings.parse_settings(plan.section_settings(SECTION))
    return [
        PlannedUnit(spec.key, role, trial)
        for spec in settings.specs()
        for role in ROLES
        for trial in range(1, settings.trials + 1)
    ]


def stored_units(view: RunView) -> list[UnitOutcome]:
    """Each stored trial of each drill in each environment, numbered from 1 (a row stored
    before drills were repeated is its one trial)."""
    found = []
    for run in drill_runs(view):
        trials = run.trials or ({"verdict": run.verdict.value, "reason": run.reason_text},)
        for number, trial in enumerate(trials, start=1):
            why = str(trial.get("first_error") or trial.get("reason") or "")
            unit = PlannedUnit(run.key, run.env_role, number)
            found.append(UnitOutcome(unit, str(trial.get("verdict")), why))
    return found


def _trials_said(base: DrillRun | None, cand: DrillRun) -> str:
    """`` (3 of 3 trials against 0 of 3)`` where either environment ran several trials."""
    if base is None or max(base.trial_count, cand.trial_count) == 1:
        return ""
    return (
        f" ({base.trials_passed} of {base.trial_count} trials against "
        f"{cand.trials_passed} of {cand.trial_count})"
    )


def blocking_reasons(view: Any, policy: Mapping[str, Any]) -> list[str]:
    """Why the drills say no-go under ``policy`` (keys and defaults: module docstring)."""
    results = drill_runs(view)
    by_key = {(r.key, r.env_role): r for r in results}
    rules = {**POLICY_DEFAULTS, **policy}
    reasons: list[str] = []
    for key in sorted({r.key for r in results}):
        base, cand = by_key.get((key, "baseline")), by_key.get((key, "candidate"))
        if cand is None:
            continue
        # Only a difference the trials support (drill/repeats.py) is a regression; an
        # error is no regression but a drill that did not happen (``accounting.py``).
        regressed = (
            base is not None
            and cand.verdict is not DrillVerdict.ERROR
            and repeats.compare(base, cand).better == "baseline"
        )
        if rules["drill_block_on_regression"] and regressed:
            reasons.append(
                f"drill {key} passed in the baseline but is {cand.verdict.value} in the "
                f"candidate{_trials_said(base, cand)}: {cand.reason_text}"
            )
        if rules["drill_block_on_wrong_result"]:
            wrong = _wrong_result(cand, float(rules["drill_loss_rtol"]))
            reasons += [f"drill {key}: {wrong}"] if wrong else []
        if base is None:
            continue
        reasons += [f"drill {key}: {slower}" for slower in _slowdowns(base, cand, rules)]
        lost_culprit = (base.named_culprit, cand.named_culprit) == (True, False)
        if rules["drill_block_on_flight_recorder"] and lost_culprit:
            reasons.append(
                f"drill {key}: the Flight Recorder named the culprit in the "
                "baseline but not in the candidate"
            )
    return reasons


def _wrong_result(cand: DrillRun, rtol: float) -> str:
    """What is wrong with the candidate's finished job, if anything: replicas that
    differ, a step off the fault-free run, or a final loss off it."""
    # A non-deterministic job of the user's is judged within the tolerance they set.
    rtol_here = max(rtol, float(cand.job_rtol or 0.0))
    loss, ref = trajectory.figure(cand.final_loss), trajectory.figure(cand.reference_loss)
    rows = list(cand.step_diffs or [])
    if cand.params_identical is False:
        return "the candidate's replicas finished with different parameters"
    if trajectory.first_divergence(rows, rtol) is not None:
        return f"in the candidate, {trajectory.describe(trajectory.summary(rows, rtol))}"
    # A figure not recorded is NaN, and NaN is never off by more than the tolerance.
    if abs(loss - ref) > rtol_here * abs(ref):
        return (
            f"the candidate's final loss {loss:.6g} is off the "
            f"fault-free {ref:.6g} (rtol {rtol_here:g})"
        )
    return ""


def _slowdowns(base: DrillRun, cand: DrillRun, rules: Mapping[str, Any]) -> list[str]:
    """The recovery times the candidate took much longer over than the baseline."""
    factor = float(rules["drill_max_slowdown"])
    floor_s = float(rules["drill_slowdown_floor_s"])
    slower = []
    for metric in ("detect_s", "resume_s"):
        before = trajectory.figure(getattr(base, metric))
        after = trajectory.figure(getattr(cand, metric))
        # NaN (not recorded) on either side compares false: no slowdown is claimed.
        if after > before * factor and after - before >= floor_s:
            slower.append(
                f"{metric} {after:.1f} s in the candidate against {before:.1f} s in the baseline"
            )
    return slower
