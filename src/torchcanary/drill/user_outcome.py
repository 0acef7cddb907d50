"""What a drill of the user's job measured, and its verdict, in the job contract's terms
(``docs/drills.md``): the steps it reported against its fault-free run's, how it ended,
and the ranks that died of a signal on the way (``job_exits.py``).

Orchestrator side; :class:`~torchcanary.drill.user_runner.UserJobRunner` calls
:func:`measure` and :func:`judge` where the built-in job's runner measures its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from torchcanary.drill import first_errors, job_compare, job_exits, timeline
from torchcanary.drill.catalog import RESTARTS, DrillSpec
from torchcanary.drill.drill import JobLaunch
from torchcanary.drill.job_exits import RankDeath
from torchcanary.drill.job_injectors import LeadInjector
from torchcanary.drill.judging import fault_facts
from torchcanary.drill.launch import Area
from torchcanary.drill.result import DrillVerdict
from torchcanary.drill.trajectory import relative_difference
from torchcanary.drill.user_job import IN_PLACE, UserJob

# measuring and judging ---------------------------------------------------------------
# What a drill keeps of the fault-free run it was compared with.
_REFERENCE_KEPT = (
    *("ok", "final_step", "final_loss", "run_s", "throughput", "step_source"),
    *("cached", "teardown_trouble", "leave"),
)


def measure(
    job: UserJob, spec: DrillSpec, area: Area, run: JobLaunch, reference: dict[str, Any]
) -> dict[str, Any]:
    """The drill's payload: the fault and its timeline, how the job ended, and its steps
    against the fault-free run's when it ran to its end."""
    injector = run.injector
    events = job_compare.with_job_steps(run.events)
    fault_t = injector.fault_t
    failed_exit = any(code not in (0, None) for code in run.exit_codes.values())
    figures = timeline.measure(events, fault_t, run.exit_t if failed_exit else None)
    final_step, final_loss = job_compare.final_step_and_loss(events)
    deaths = _signal_deaths(spec, area, run)
    # Only a run that should end, and did, has an end to compare with the fault-free one;
    # ranks that crashed on their way out after their last step did end.
    teardown = _teardown(spec, run, deaths)
    finished = spec.recovery != "timeout" and teardown is not None
    recovered = [e for e in events if e["ev"] == "recovered"]
    dumps = sorted(p.name for p in area.flight.glob("*")) if area.flight.exists() else []
    payload: dict[str, Any] = {
        "spec": spec.to_json(),
        "parallel": "job",
        "job": job.text,
        "comparison": job.comparison(),
        "job_rtol": job.tolerance,
        "step_source": job_compare.step_source(run.events),
        "fault_at": "step" if reference.get("steps") else "time",
        "steps_logged_by": sorted({int(row[1]) for row in reference.get("steps") or ()}),
        "struck_in_backward_of_step": _backward_step(events),
        "started_at_step": first_step(events),
        **fault_facts(injector.detail, injector.struck_rank, figures),
        "restarts": max((int(e.get("attempt", 0)) for e in events), default=0),
        "final_step": final_step,
        "final_loss": final_loss if finished else None,
        "last_reported_loss": final_loss,
        "reference_loss": reference.get("final_loss"),
        "reference": {k: reference.get(k) for k in _REFERENCE_KEPT},
        "in_place": _in_place_facts(spec, events, recovered),
        **_errors(events, fault_t),
        "first_errors": first_errors.collect(
            events, fault_t, area.logs, f"dumps {', '.join(dumps)}" if dumps else None
        ),
        "exit_codes": run.exit_codes,
        # Under torchrun, those the fault does not explain: of ranks that had finished.
        "signal_deaths": [d.to_json() for d in deaths if d.after_done or spec.recovery in IN_PLACE],
        "ran_to_end": finished,
        # Threads each rank still had as the interpreter began to exit (the shim's
        # exit event; the last launch's): where a crash on the way out would start.
        "threads_at_exit": {
            f"rank{e['rank']}": e.get("threads") for e in events if e["ev"] == "exit"
        },
        "teardown_trouble": teardown_json(teardown or []),
        "bounded_out": run.bounded_out,
        "killed_at_cleanup": len(run.leftovers_killed),
        "flight_recorder": {"dumps": dumps} if dumps else {},
        "timeline": timeline.compact(events, fault_t, injector.detail),
    }
    if fault_t is not None and payload["first_error"] is None:
        payload["first_error"] = first_errors.first(payload["first_errors"])
    if finished and fault_t is not None and reference.get("steps"):
        check = job_compare.compare(events, reference["steps"], job.tolerance)
        payload["job_step_diffs"] = check.pop("rows")
        payload["step_check"] = check
    shutil.rmtree(area.root / "scratch", ignore_errors=True)  # the job's checkpoints
    return payload


def first_step(events: list[dict[str, Any]]) -> int | None:
    """The first step the job's first launch reported (before any fault: none is injected
    before ``at_step``), or None when it reported none."""
    steps = [int(e["step"]) for e in job_compare.job_steps(events) if not e.get("attempt")]
    return min(steps, default=None)


def _backward_step(events: list[dict[str, Any]]) -> int | None:
    """The step inside whose backward pass the target was struck: as it said, when it
    reports its steps; else the first step the ranks that log never finished in that launch
    (no rank of a DDP job finishes a step while one is held in its backward)."""
    struck = next((e for e in events if e["ev"] == "backward"), None)
    if struck is None:
        return None
    if struck.get("step") is not None:
        return int(struck["step"])
    done = [int(e["step"]) for e in job_compare.job_steps(events) if not e.get("attempt")]
    return max(done) + 1 if done else None


def resumed_elsewhere(payload: dict[str, Any], reference: dict[str, Any]) -> str | None:
    """Why an attempt started where its fault-free run did not, or None: with no fault
    injected yet it can only have resumed from state it did not make itself (a checkpoint
    an earlier attempt left outside the attempt's folder and ``{scratch}``)."""
    started, expected = payload.get("started_at_step"), reference.get("started_at_step")
    if started is None or expected is None or started <= expected:
        return None
    return (
        f"the job started at step {started}, not at step {expected} as its fault-free run "
        "did, with no fault injected: it resumed from state it did not make (a checkpoint "
        "an earlier attempt left outside its folder?); fix: give that path as "
        "{scratch}/..., a fresh folder for every attempt"
    )


def _errors(events: list[dict[str, Any]], fault_t: float | None) -> dict[str, Any]:
    """What the job said went wrong: on its own before the fault, and after it."""
    errors = [e for e in events if e["ev"] == "error"]
    own = [e for e in errors if fault_t is None or e["t"] < fault_t]
    after = [e for e in errors if fault_t is not None and e["t"] >= fault_t]
    return {
        "unsupported": next((e["reason"] for e in events if e["ev"] == "unsupported"), None),
        "job_errors_before_fault": [e.get("error") for e in own],
        "first_error": after[0]["error"] if after else None,
        "error_kinds": sorted({str(e.get("kind")) for e in after}),
    }


def judge(
    job: UserJob,
    spec: DrillSpec,
    run: JobLaunch,
    payload: dict[str, Any],
    reference: dict[str, Any],
) -> tuple[DrillVerdict, str]:
    """The drill's verdict and its reason, from :func:`measure`'s payload."""
    if payload["unsupported"]:
        return DrillVerdict.ABSENT, f"your job cannot {spec.recovery}: {payload['unsupported']}"
    if spec.recovery in IN_PLACE and not payload["in_place"]["opted_in"]:
        return DrillVerdict.ABSENT, _not_taking_part(spec)
    resumed = resumed_elsewhere(payload, reference)
    if resumed:
        return DrillVerdict.ERROR, resumed
    if run.injector.fault_t is None:
        return DrillVerdict.ERROR, _never_struck(spec, run, payload)
    detect = payload["detect_s"]
    if spec.recovery == "timeout":
        if detect is None:
            return DrillVerdict.FAILED, (
                f"{spec.fault} never surfaced in the job within {spec.drill_timeout_s:g} s "
                "(does it set a timeout on its process group?)"
            )
        kinds = ", ".join(payload["error_kinds"]) or "an exit"
        return DrillVerdict.PASSED, f"surfaced as {kinds} after {detect:.1f} s"
    if not payload["ran_to_end"]:
        why = "bound reached" if run.bounded_out else f"exit codes {run.exit_codes}"
        return DrillVerdict.FAILED, (
            f"the job did not finish after {spec.fault} ({why}); first error: "
            f"{payload['first_error'] or 'none recorded'}; by source: "
            + first_errors.describe(payload["first_errors"])
            + _deaths_said(payload["signal_deaths"], reference)
        )
    return _against_reference(job, spec, payload)


def _never_struck(spec: DrillSpec, run: JobLaunch, payload: dict[str, Any]) -> str:
    """Why no fault was injected: the job failed first, never started, or never got there."""
    if payload["job_errors_before_fault"]:
        return (
            f"the job failed on its own before the fault: {payload['job_errors_before_fault'][0]}"
        )
    if not run.events:
        tail = "; ".join(f"{name}: {text[-300:]}" for name, text in run.launch_logs.items())
        return f"the job never started {tail}".strip()
    if payload["fault_at"] == "step" and payload["started_at_step"] is None:
        return _logged_no_step(run)
    if isinstance(run.injector, LeadInjector):
        at = f"step {spec.at_step} (as rank {run.injector.lead_rank}, which logs it, saw it)"
    elif payload["fault_at"] == "step":
        at = f"step {spec.at_step} on rank {spec.target_rank}"
    else:
        at = f"the fault time on rank {spec.target_rank}"
    return f"the job never reached {at}, so no fault was injected; {_how_it_ended(run)}"


def _logged_no_step(run: JobLaunch) -> str:
    """A job whose fault-free run showed steps and that showed none: how it ended, how long
    it ran and the last lines it wrote, which say why better than we can."""
    launched = [float(e["t"]) for e in run.events if e["ev"] == "launch"]
    ran = (
        f" after {run.exit_t - min(launched):.1f} s" if run.exit_t is not None and launched else ""
    )
    ended = (
        "it was still running at the drill's bound"
        if run.bounded_out
        else f"it exited with codes {run.exit_codes}{ran}"
    )
    said = [line for text in run.launch_logs.values() for line in text.splitlines() if line.strip()]
    last = " | ".join(line.strip()[:200] for line in said[-3:]) or "none, it wrote nothing"
    return (
        f"the job logged no step, so no fault was injected: {ended}; its last lines: {last} "
        "(a job that resumes from a finished checkpoint logs none: give its checkpoint path "
        "as {scratch}/...)"
    )


def _against_reference(
    job: UserJob, spec: DrillSpec, payload: dict[str, Any]
) -> tuple[DrillVerdict, str]:
    """The verdict of a job that recovered and ran to its end: its steps, last step and
    final loss against the fault-free run's."""
    how = (
        f"restarted {payload['restarts']}x" + _restarts_for_deaths(payload)
        if spec.recovery in RESTARTS
        else f"{spec.recovery} done in place"
        if spec.recovery in IN_PLACE
        else "ran on through the fault"
    )
    check = payload.get("step_check")
    if check is None:
        return DrillVerdict.PASSED, (
            f"{how} and ran to its end; not compared step by step: the job reports no "
            "steps (call report_step, or set job_step_pattern to its log line)"
            + teardown_said(payload)
        )
    if check["first_difference"] is not None:
        return DrillVerdict.FAILED, job_compare.describe(check) + f", compared {job.comparison()}"
    ref_step, ref_loss = payload["reference"]["final_step"], payload["reference_loss"]
    if payload["final_step"] != ref_step:
        return DrillVerdict.FAILED, (
            f"the job ended at step {payload['final_step']}, the fault-free run at {ref_step}"
        )
    loss = payload["final_loss"]
    if ref_loss is not None and relative_difference(loss, ref_loss) > job.tolerance:
        return DrillVerdict.FAILED, (
            f"final loss {loss} differs from the fault-free {ref_loss}, compared {job.comparison()}"
        )
    leave = payload["reference"].get("leave")
    if leave:
        how += (
            f" (compared with a fault-free run in which rank {leave['ranks'][0]} leaves "
            f"after step {leave['after_step']})"
        )
    return DrillVerdict.PASSED, (
        f"{how}; ended at step {ref_step} like the fault-free run; "
        f"{job_compare.describe(check)}, compared {job.comparison()}" + teardown_said(payload)
    )


def _not_taking_part(spec: DrillSpec) -> str:
    return (
        f"{spec.recovery} recovers in place inside the job, and your job does not "
        "take part: it never called torchcanary.drill.in_place_drill() (see "
        "docs/drills.md, 'Recovering in place')"
    )


def absent_in_reference(spec: DrillSpec, reference: dict[str, Any]) -> str | None:
    """Why a shrink is absent, as its fault-free run (made in place) already shows: the job
    said it cannot shrink, or never took part. None otherwise."""
    if reference.get("unsupported"):
        return f"your job cannot {spec.recovery}: {reference['unsupported']}"
    if reference.get("opted_in") is False:
        return _not_taking_part(spec)
    return None


def _how_it_ended(run: JobLaunch) -> str:
    """How a job that was never struck ended: its exit codes and the last line it wrote."""
    if run.bounded_out:
        return "it was still running at the drill's bound"
    said = [line for text in run.launch_logs.values() for line in text.splitlines() if line.strip()]
    last = f": {said[-1].strip()[:300]}" if said else ""
    return f"it exited with codes {run.exit_codes}{last}"


def _codes_that_count(spec: DrillSpec, run: JobLaunch) -> dict[str, int | None]:
    """The exits that say whether the job finished: in place, the struck rank's original
    process is the fault's (its replacement, if any, counts instead)."""
    if spec.recovery not in IN_PLACE or run.injector.struck_rank is None:
        return run.exit_codes
    struck = f"main{run.injector.struck_rank}"
    return {name: code for name, code in run.exit_codes.items() if name != struck}


def _signal_deaths(spec: DrillSpec, area: Area, run: JobLaunch) -> list[RankDeath]:
    """Deaths by a signal, each with the rank's last words: in place, of the processes that
    count; under torchrun, of every worker its agents saw die (the struck one too)."""
    if spec.recovery not in IN_PLACE:
        logs = "\n".join(read_log(path) for path in sorted(area.logs.glob("torchrun*.log")))
        return job_exits.torchrun_deaths(logs, run.events)
    found = []
    for name, code in _codes_that_count(spec, run).items():
        rank, log = _process_rank(name)
        death = job_exits.process_death(rank, code, read_log(area.logs / f"{log}.log"), run.events)
        if death is not None:
            found.append(death)
    return found


def _process_rank(name: str) -> tuple[int, str]:
    """The rank of an in-place drill's process (``main<rank>``, ``replacement<gen>.<rank>``)
    and the name of its log."""
    generation, _, rank = name.removeprefix("replacement").rpartition(".")
    if not generation:
        rank = name.removeprefix("main")
    return int(rank), f"rank{rank}-join{generation}" if generation else f"rank{rank}"


def _teardown(spec: DrillSpec, run: JobLaunch, deaths: list[RankDeath]) -> list[RankDeath] | None:
    """Whether the job ran to its end: the crashes on the way out after the last step (none
    when every exit that counts is 0), or None when it did not end.

    Under torchrun the last launch must have run whole (``job_exits.teardown``); in place,
    each process that counts must exit 0 or die of a signal after its rank reported done."""
    codes = _codes_that_count(spec, run)
    if all(code == 0 for code in codes.values()):
        return []
    if spec.recovery not in IN_PLACE:
        last = max((int(e.get("attempt", 0)) for e in run.events if e["ev"] == "launch"), default=0)
        return job_exits.teardown(deaths, run.events, spec.ranks, last)
    after_end = {death.rank: death for death in deaths if death.after_done}
    failed = [name for name, code in codes.items() if code != 0]
    if not all(_process_rank(name)[0] in after_end for name in failed):
        return None
    return [after_end[_process_rank(name)[0]] for name in failed]


def teardown_json(deaths: list[RankDeath]) -> list[dict[str, Any]]:
    return [death.to_json() | {"said": death.describe()} for death in deaths]


def teardown_said(payload: dict[str, Any]) -> str:
    """The crashes after the last step, in words, for a reason (empty when there were none)."""
    trouble = payload.get("teardown_trouble") or []
    if not trouble:
        return ""
    return "; teardown trouble (not a failure: every step ran): " + "; ".join(
        str(death["said"]) for death in trouble
    )


def _restarts_for_deaths(payload: dict[str, Any]) -> str:
    """Why torchrun restarted more than the fault asks for: a rank died after finishing."""
    last = payload["restarts"]
    early = [d for d in payload["signal_deaths"] if d["attempt"] < last]
    if not early:
        return ""
    return f" ({len(early)} of them after {RankDeath(**early[0]).describe()})"


def read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _deaths_said(deaths: list[dict[str, Any]], reference: dict[str, Any]) -> str:
    """The signal deaths of a failed drill in words, and how often the fault-free run died."""
    if not deaths:
        return ""
    said = "; ".join(RankDeath(**death).describe() for death in deaths)
    died = reference.get("died_in_tries") or []
    if died:
        said += (
            f"; its fault-free run died of a signal in {len(died)} of "
            f"{reference.get('tries')} tries too"
        )
    return f"; {said}"


def _in_place_facts(
    spec: DrillSpec, events: list[dict[str, Any]], recovered: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """What the job said of its in-place recovery (``job_inplace.py``), or None off that path."""
    if spec.recovery not in IN_PLACE:
        return None
    recovering = [e for e in events if e["ev"] == "recovering"]
    return {
        "opted_in": any(e["ev"] == "in_place" for e in events),
        "dead": recovering[0].get("dead") if recovering else None,
        "replacements": sum(len(e.get("dead") or ()) for e in recovering)
        if spec.recovery == "reconfigure"
        else 0,
        "recovered": [
            {k: v for k, v in e.items() if k not in ("ev", "pid", "attempt")} for e in recovered
        ],
    }
