"""The drill section: fault drills on a small real training job, in both environments.

Each drill (``fault:recovery``, see :mod:`torchcanary.drill.catalog`) runs once per
environment and is stored at once as its typed record (``drill/result.py``:
``DrillRun``, key ``<drill>``, env_role ``<role>``, verdict a ``DrillVerdict``); the
fault-free runs the drills were compared against are stored as ``DrillReference`` rows
keyed ``reference:<mode>``. The policy and the report read these records' fields.

Settings, ``[tool.torchcanary.drill]`` (defaults in brackets):
- ``faults``: drill names, ``"fault"`` or ``"fault:recovery"``, or ``"all"``
  [``["kill:restart-unshared", "kill:reconfigure", "hang:timeout"]``: both environments
  in about 40 s on 2 cores, 50 s when the fault-free runs are made too];
- ``ranks`` [2], 2 to 4; ``steps`` [30]; ``at_step`` [12], the step after which the fault
  strikes; ``target_rank`` [1]; ``timeout_s`` [10], the process-group timeout;
  ``ckpt_every`` [5]; ``parallel`` ["ddp"] or "fsdp" (FSDP2 ``fully_shard``), the mode
  every drill runs, the in-place ones included (each result names the mode that ran);
  ``step_pad_s`` [0.05]; ``net_rate`` ["20mbit"] for net-slow; ``drill_timeout_s`` [180],
  the bound on one drill; ``seed`` [0].
- the user's own job instead of the built-in tiny GPT (``drill/user_job.py``): ``job``
  [""], the script and its arguments (``{scratch}`` is a fresh folder per run);
  ``job_with`` [[]], requirements installed over each environment first (``"-e ."``);
  ``job_step_pattern``, the regex (groups ``step``, ``loss``) for printed step lines;
  ``job_rtol`` [none: deterministic], the relative tolerance of a non-deterministic job;
  ``job_fault_after_s`` [half the fault-free run], when to strike a job that shows no steps;
  ``job_cwd`` [where torchcanary runs], the folder the job starts in; ``job_env`` [{}],
  variables the job is given; ``job_fresh_reference`` [false], make the job's fault-free
  run again instead of reusing the one cached for this job, its files and environment
  (the built-in job's too: its key is the environment, torchcanary's files and the
  job's shape).
- repeats (``drill/repeats.py``): ``trials`` [1], how many times each drill runs in each
  environment; ``disagreement_trials`` [3], how many trials each environment gets when
  they disagree (one passed every trial, the other failed or errored in one); 1 to 10.

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

import re
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import Any

from torchcanary.context import ROLES, RunContext
from torchcanary.drill import repeats, trajectory
from torchcanary.drill.catalog import DEFAULT_DRILLS, FULL_DRILLS, DrillSpec, parse_drill_name
from torchcanary.drill.drill import DrillOutcome, DrillRunner
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.result import (
    REFERENCE_PREFIX,
    DrillRecord,
    DrillRun,
    drill_record,
    from_json,
    from_rows,
)
from torchcanary.drill.user_job import JOB_DEFAULTS, UserJobRunner, parse_job_settings, user_job
from torchcanary.drill.verdict import DrillVerdict
from torchcanary.envs.cache import cache_root
from torchcanary.errors import ConfigError
from torchcanary.section_types import NotRun, PolicyBounds
from torchcanary.store.rows import SectionResult

SECTION = "drill"
MAX_RANKS = 4

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

_DEFAULTS = {f.name: f.default for f in fields(DrillSpec) if f.name not in ("fault", "recovery")}
_NUMBERS = ("timeout_s", "step_pad_s", "drill_timeout_s")
_INTEGERS = ("ranks", "steps", "at_step", "target_rank", "ckpt_every", "seed")


def _problem(message: str) -> ConfigError:
    return ConfigError(f"[tool.torchcanary.drill] {message}")


def _faults(value: Any) -> list[str]:
    if value == "all":
        return list(FULL_DRILLS)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _problem(f'faults = {value!r}: give a list such as ["kill:restart"] or "all"')
    names = []
    for name in value:
        try:
            fault, recovery = parse_drill_name(str(name))
        except ValueError as exc:
            raise _problem(f"faults: {exc}") from exc
        if f"{fault}:{recovery}" not in names:
            names.append(f"{fault}:{recovery}")
    if not names:
        raise _problem("faults = []: name at least one drill, or leave faults out")
    return names


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the drill table and fill in defaults; ConfigError names problem and fix."""
    own = {*_DEFAULTS, *JOB_DEFAULTS, *repeats.REPEAT_DEFAULTS}
    unknown = sorted(set(mapping) - own - {"faults"})
    if unknown:
        known = ", ".join(sorted(own))
        raise _problem(f"unknown key {unknown[0]!r}: known keys are faults, {known}")
    settings: dict[str, Any] = {**_DEFAULTS, **repeats.REPEAT_DEFAULTS}
    try:
        settings.update(parse_job_settings(dict(mapping)))
    except ValueError as exc:
        raise _problem(str(exc)) from exc
    settings["faults"] = _faults(mapping.get("faults", list(DEFAULT_DRILLS)))
    for key in (*_INTEGERS, *repeats.REPEAT_DEFAULTS):
        value = mapping.get(key, settings[key])
        if isinstance(value, bool) or not isinstance(value, int):
            raise _problem(f"{key} = {value!r}: must be a whole number")
        settings[key] = value
    for key in repeats.REPEAT_DEFAULTS:
        if not 1 <= settings[key] <= repeats.MAX_TRIALS:
            raise _problem(f"{key} = {settings[key]}: choose from 1 to {repeats.MAX_TRIALS}")
    for key in _NUMBERS:
        value = mapping.get(key, settings[key])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise _problem(f"{key} = {value!r}: must be a positive number of seconds")
        settings[key] = float(value)
    parallel = mapping.get("parallel", settings["parallel"])
    if parallel not in ("ddp", "fsdp"):
        raise _problem(f'parallel = {parallel!r}: use "ddp" or "fsdp"')
    settings["parallel"] = parallel
    net_rate = mapping.get("net_rate", settings["net_rate"])
    if not isinstance(net_rate, str) or not re.fullmatch(r"\d+(\.\d+)?[kmg]?bit", net_rate):
        raise _problem(f'net_rate = {net_rate!r}: give a tc rate such as "20mbit"')
    settings["net_rate"] = net_rate
    _check_shape(settings)
    return settings


def _check_shape(settings: dict[str, Any]) -> None:
    ranks, steps, at_step = settings["ranks"], settings["steps"], settings["at_step"]
    if not 2 <= ranks <= MAX_RANKS:
        raise _problem(
            f"ranks = {ranks}: the drill job runs 2 to {MAX_RANKS} ranks on one "
            f"machine; set ranks between 2 and {MAX_RANKS}"
        )
    if steps < 4:
        raise _problem(f"steps = {steps}: the job needs at least 4 steps")
    if not 1 <= at_step <= steps - 2:
        raise _problem(
            f"at_step = {at_step} is beyond the job's {steps} steps: choose "
            f"at_step from 1 to {steps - 2}, or raise steps"
        )
    if not 0 <= settings["target_rank"] < ranks:
        raise _problem(
            f"target_rank = {settings['target_rank']} but the job has {ranks} "
            f"ranks: choose target_rank from 0 to {ranks - 1}"
        )
    if settings["ckpt_every"] < 1:
        raise _problem(f"ckpt_every = {settings['ckpt_every']}: must be at least 1")


def drill_specs(settings: Mapping[str, Any]) -> list[DrillSpec]:
    common = {key: settings[key] for key in _DEFAULTS}
    return [DrillSpec(*parse_drill_name(name), **common) for name in settings["faults"]]


def run(ctx: RunContext) -> None:
    """Run every configured drill in each environment, repeating it where the environments
    disagree (``drill/repeats.py``), committing each drill as its trials finish."""
    settings = parse_settings(ctx.plan.section_settings(SECTION))
    specs = drill_specs(settings)
    roles = [role for role in ROLES if role in ctx.environments]
    done = ctx.store.done_section_keys(ctx.run_id, SECTION) if ctx.resume else set()
    stored = _stored_trials(ctx) if ctx.resume else {}
    job = user_job(settings)
    runners: dict[str, DrillRunner] = {}
    cache = KeptReferences(cache_root() / "drill-references", ctx.progress.note)
    for role in roles:
        env, work = ctx.environments[role], ctx.work_dir / "drills" / role
        keeping = {
            "cache": cache,
            "environment_key": f"{env.path}|{env.python}|{env.torch_version}|{env.spec.text}",
            "fresh_reference": settings["job_fresh_reference"],
        }
        runners[role] = (
            DrillRunner(env.python, ctx.import_root, work, **keeping)
            if job is None
            else UserJobRunner(env.python, env.path, ctx.import_root, work, job, **keeping)
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
        settings: Mapping[str, Any],
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
        self._run_until(trials, self.settings["trials"])
        verdicts = {role: [o.verdict for o in outcomes] for role, outcomes in trials.items()}
        verdicts.update(earlier)
        if len(verdicts) < 2 or not repeats.disagree(*verdicts.values()):
            return
        wanted = max(self.settings["trials"], self.settings["disagreement_trials"])
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


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def drill_runs(view: Any) -> list[DrillRun]:
    """The drill rows of ``view`` as records, the fault-free reference runs left out."""
    return [r for r in from_rows(view.sections.get(SECTION, [])) if isinstance(r, DrillRun)]


def not_run(view: Any) -> list[NotRun]:
    """Drills that errored in the candidate (the fault never injected, the job never
    started): a drill that did not happen says nothing of the candidate's recovery."""
    return [
        NotRun(f"drill {run.key}", run.reason_text)
        for run in drill_runs(view)
        if run.env_role == "candidate" and run.verdict is DrillVerdict.ERROR
    ]


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
    rtol = float(rules["drill_loss_rtol"])
    factor = float(rules["drill_max_slowdown"])
    floor_s = float(rules["drill_slowdown_floor_s"])
    reasons: list[str] = []
    for key in sorted({r.key for r in results}):
        base, cand = by_key.get((key, "baseline")), by_key.get((key, "candidate"))
        if cand is None:
            continue
        # Only a difference the trials support (drill/repeats.py) is a regression; an
        # error is no regression but a drill that did not happen (``not_run``).
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
        # A non-deterministic job of the user's is judged within the tolerance they set.
        rtol_here = max(rtol, float(cand.job_rtol or 0.0))
        if rules["drill_block_on_wrong_result"]:
            loss, ref = _number(cand.final_loss), _number(cand.reference_loss)
            rows = list(cand.step_diffs or [])
            if cand.params_identical is False:
                reasons.append(
                    f"drill {key}: the candidate's replicas finished with different parameters"
                )
            elif trajectory.first_divergence(rows, rtol) is not None:
                check = trajectory.summary(rows, rtol)
                reasons.append(f"drill {key}: in the candidate, {trajectory.describe(check)}")
            elif loss is not None and ref is not None and abs(loss - ref) > rtol_here * abs(ref):
                reasons.append(
                    f"drill {key}: the candidate's final loss {loss:.6g} is off the "
                    f"fault-free {ref:.6g} (rtol {rtol_here:g})"
                )
        if base is None:
            continue
        for metric in ("detect_s", "resume_s"):
            before, after = _number(getattr(base, metric)), _number(getattr(cand, metric))
            if (
                before is not None
                and after is not None
                and after > before * factor
                and after - before >= floor_s
            ):
                reasons.append(
                    f"drill {key}: {metric} {after:.1f} s in the candidate against "
                    f"{before:.1f} s in the baseline"
                )
        lost_culprit = (base.named_culprit, cand.named_culprit) == (True, False)
        if rules["drill_block_on_flight_recorder"] and lost_culprit:
            reasons.append(
                f"drill {key}: the Flight Recorder named the culprit in the "
                "baseline but not in the candidate"
            )
    return reasons
