"""Section "calls": the torch calls your code makes, recorded and replayed in both versions.

``run(ctx)``: the user's command (as the stack runs it, through ``user_command/``) runs
once in the baseline with the recording plugin on (``worker/replay``: every distinct torch
call, its site and its small tensor arguments), and so does each workload given (its own
``--workload``, or the bench's of this run: built and stepped twice in a process of its
own, never inside the bench's timed samples); then each recording is replayed, one call
at a time in a process that may die, in the baseline, in the baseline again (the control)
and in the candidate, each in its version's overlay with the user's project installed (its
operators registered); ``compare.compare_call`` judges each call.

Rows (section ``calls``; typed records in ``calls/result.py``): ``__summary__`` with the
counts, and one row per call whose verdict is not ``same``.

Policy keys (defaults):
  calls_block_on = ["raises-now"]   the verdicts that make the run a no-go
  calls_min_compared = 0.9          the share of recorded calls that must be compared by
                                    value (their outputs and changed arguments); less is
                                    not a go
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from torchcanary.calls.compare import CallComparison, CallVerdict, Replay, compare_call
from torchcanary.calls.merge import merge_workers
from torchcanary.calls.repro import SHOWN, kept_call
from torchcanary.calls.result import (
    CallChange,
    CallsSummary,
    SummaryStatus,
    from_rows,
)
from torchcanary.calls.settings import CallsSettings
from torchcanary.context import RunContext
from torchcanary.plan import RunPlan
from torchcanary.release_text import ReleaseText, release_text
from torchcanary.section_types import PlannedUnit, PolicyBounds
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult
from torchcanary.user_command.command import UserCommand
from torchcanary.user_command.execute import RoleRunner
from torchcanary.user_command.session import run_command
from torchcanary.worker.calls import (
    CALLS_QUIET_VAR,
    CALLS_RECORD_PLUGIN,
    CALLS_RECORD_VAR,
    CALLS_RECORD_WORKLOAD_MAIN,
    CALLS_REPLAY_MAIN,
    CALLS_USER_CODE_VAR,
)

SECTION = "calls"
# What the other sections offer (plan.outputs): workload specs recorded too (the bench's),
# and the release's notes files and extra probe modules, whose words name calls (the diff's
# and the claims').
WORKLOADS = "workloads"
RELEASE_NOTES = "release_notes"
PROBE_MODULES = "probe_modules"
REPLAYS = ("baseline", "control", "candidate")  # control: the baseline again
_PROGRESS_EVERY_S = 5.0  # how often a replay's progress is read from its output
POLICY_DEFAULTS: dict[str, Any] = {"calls_block_on": ["raises-now"], "calls_min_compared": 0.9}
POLICY_BOUNDS = {"calls_min_compared": PolicyBounds(0.0, 1.0, "a share: 0.9 is 90 %")}
# The verdicts reached by comparing a call's replays (by value, unless metadata_only says)
_COMPARED = (
    CallVerdict.RAISES_NOW.value,
    CallVerdict.DIFFERENT_RESULT.value,
    CallVerdict.NEW_WARNING.value,
    CallVerdict.NONDETERMINISTIC.value,
    CallVerdict.SAME.value,
)
# The call set is checked when it was recorded and every call replayed in both versions;
# nothing recorded (``not-checked``) or replays that broke off (``incomplete``) is not.
CHECKED_VERDICTS = frozenset((SummaryStatus.CHANGES.value, SummaryStatus.NO_CHANGES.value))
POLICY_CHOICES = {"calls_block_on": tuple(v.value for v in CallVerdict)}


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """One unit: the call set recorded from the command (or workloads), replayed in both."""
    return [PlannedUnit(SUMMARY_KEY, BOTH)]


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``[calls]``: the stack's keys, plus ``candidate_env`` and ``replay_timeout_s``."""
    return CallsSettings.parse(mapping).to_json()


def run(ctx: RunContext) -> None:
    settings = CallsSettings.from_json(ctx.plan.section_settings(SECTION))
    workloads = _workloads(settings, ctx.plan.outputs.get(WORKLOADS, []))
    if not settings.user_command.command and not workloads:
        _save(ctx, CallsSummary(SummaryStatus.NOT_CHECKED, reason="no command given"))
        return
    root = ctx.work_dir / SECTION
    recordings, baseline_python = _record_all(ctx, settings, workloads, root)
    ran = "; ".join(f"{r.label}: {r.ended}" for r in recordings)
    what = "; ".join(r.label for r in recordings)
    for recording in recordings:
        merge_workers(recording.folder)  # pytest-xdist's workers each wrote their own
    written = [r for r in recordings if (r.folder / "calls.jsonl").is_file()]
    if not written:
        reason = f"no recording was written ({ran}; see {root})"
        _save(ctx, CallsSummary(SummaryStatus.NOT_CHECKED, what, reason))
        return
    counts: dict[str, int] = {}
    not_replayable: dict[str, int] = {}
    metadata_only: dict[str, int] = {}
    not_followed: dict[str, int] = {}
    not_sampled_by: dict[str, int] = {}
    recorded = not_sampled = not_examined = 0
    notes = _release_text(ctx)
    pythons = {"baseline": baseline_python, "candidate": _candidate_python(ctx, settings, root)}
    _replay_all(ctx, settings, written, pythons)
    for recording in written:
        calls = _compare(ctx, settings, recording, counts, metadata_only, notes)
        recorded += len(calls)
        meta = json.loads((recording.folder / "meta.json").read_text())
        not_sampled += meta.get("not_sampled", 0)
        not_examined += meta.get("not_examined", 0)
        for name, count in meta.get("not_sampled_by", {}).items():
            not_sampled_by[name] = not_sampled_by.get(name, 0) + count
        for why, count in meta.get("not_followed", {}).items():
            not_followed[why] = not_followed.get(why, 0) + count
        for call in calls:
            if not call.get("replayable", True):
                why = str(call.get("why_not"))
                not_replayable[why] = not_replayable.get(why, 0) + 1
    summary = call_set_summary(what, ran, recorded, counts, not_replayable, metadata_only)
    summary = dataclasses.replace(
        summary,
        not_followed=not_followed,
        not_sampled=not_sampled,
        not_sampled_by=not_sampled_by,
        not_examined=not_examined,
    )
    _save(ctx, summary)
    ctx.progress.note(f"calls: {recorded} recorded, {summary.replayed} replayed, {counts}")


def call_set_summary(
    what: str,
    ran: str,
    recorded: int,
    counts: dict[str, int],
    not_replayable: dict[str, int],
    metadata_only: dict[str, int] | None = None,
) -> CallsSummary:
    """The call set's one verdict from its calls' (``counts``: verdict -> calls): a call
    whose replay broke off (``not-run``) or did not reproduce the recorded call
    (``replay-not-faithful``) compared nothing of the user's, so the set is ``incomplete``,
    a unit not checked (``accounting.py``), whatever the other calls showed.
    ``metadata_only``: why -> calls whose values went uncompared (none when not given)."""
    metadata_only = metadata_only or {}
    broke_off = counts.get(CallVerdict.NOT_RUN.value, 0)
    strayed = counts.get(CallVerdict.NOT_FAITHFUL.value, 0)
    unchanged = (
        CallVerdict.SAME.value,
        CallVerdict.NOT_REPLAYABLE.value,
        CallVerdict.NOT_RUN.value,
        CallVerdict.NOT_FAITHFUL.value,
    )
    changed = sum(n for verdict, n in counts.items() if verdict not in unchanged)
    status = SummaryStatus.CHANGES if changed else SummaryStatus.NO_CHANGES
    reasons = []
    if broke_off:
        reasons.append(
            f"{broke_off} call(s) were not replayed to the end in both versions (not-run)"
        )
    if strayed:
        reasons.append(
            f"{strayed} call(s) replayed in the baseline did not do what the recorded call did "
            "(replay-not-faithful)"
        )
    return CallsSummary(
        SummaryStatus.INCOMPLETE if reasons else status,
        what,
        reason="; ".join(reasons) or None,
        recording_run=ran,
        recorded=recorded,
        replayed=recorded - counts.get(CallVerdict.NOT_REPLAYABLE.value, 0) - broke_off,
        not_replayable=not_replayable,
        counts=counts,
        compared_by_value=sum(counts.get(v, 0) for v in _COMPARED) - sum(metadata_only.values()),
        metadata_only=metadata_only,
    )


@dataclasses.dataclass(frozen=True)
class _Recording:
    """One recorded run: what ran (``label``), where its calls went, how it ended; ``tag``
    keeps its calls' keys apart from another recording's (empty for the command's)."""

    label: str
    folder: Path
    ended: str
    tag: str = ""


def _workloads(settings: CallsSettings, offered: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The calls' own workloads and those the run's other sections offer (the bench's: its
    ``workloads`` and ``kind = "workload"`` benchmarks), each once."""
    specs = [*settings.workloads, *(dict(spec) for spec in offered)]
    unique: dict[str, dict[str, Any]] = {}
    for spec in specs:
        unique.setdefault(json.dumps([spec["target"], spec.get("params", {})]), spec)
    return list(unique.values())


def _record_all(
    ctx: RunContext, settings: CallsSettings, workloads: list[dict[str, Any]], root: Path
) -> tuple[list[_Recording], str]:
    """The user's command, then each workload, run once in the baseline while recorded, in
    one overlay (installed once); each workload's run is its own process, apart from the
    bench's timed samples. Returns the recordings and the overlay's interpreter (the
    baseline's own where the overlay could not be made), where the baseline replays run."""
    runs: list[tuple[str, str, str]] = []  # (label, command, tag)
    if settings.user_command.command:
        runs.append((settings.user_command.command, settings.user_command.command, ""))
    for index, spec in enumerate(workloads, start=1):
        text = shlex.join(["python", "-m", CALLS_RECORD_WORKLOAD_MAIN, json.dumps(spec)])
        runs.append((f"workload {spec['target'].rsplit('/', 1)[-1]}", text, f"w{index}."))
    recordings: list[_Recording] = []
    first: RoleRunner | None = None
    installed = None
    for label, text, tag in runs:
        folder = root / ("recording" if not tag else f"recording-{tag.rstrip('.')}")
        folder.mkdir(parents=True, exist_ok=True)
        env = {**settings.user_command.env, CALLS_RECORD_VAR: str(folder)}
        env[CALLS_USER_CODE_VAR] = json.dumps(settings.user_code())
        if settings.quiet_calls is not None:
            env[CALLS_QUIET_VAR] = str(settings.quiet_calls)
        if not tag:
            env["PYTEST_PLUGINS"] = CALLS_RECORD_PLUGIN
        runner = RoleRunner(
            "baseline",
            ctx.environments["baseline"],
            dataclasses.replace(settings.user_command, env=env),
            UserCommand.parse(text),
            ctx.import_root,
            root / ("baseline" if first is None else f"baseline-{tag.rstrip('.') or 'cmd'}"),
            ctx.progress.note,
        )
        if first is None:
            first, installed = runner, runner.prepare()
        runner.overlay = first.overlay
        assert installed is not None
        ended_run = runner.run_main(installed)
        ended = f"{ended_run.status}: {ended_run.detail}"
        ctx.progress.note(f"calls: {label} recorded under the baseline: {ended}")
        recordings.append(_Recording(label, folder, ended, tag))
    overlay = first.overlay if first is not None else None
    return recordings, overlay.python if overlay else ctx.environments["baseline"].python


def _candidate_python(ctx: RunContext, settings: CallsSettings, root: Path) -> str:
    """The candidate's overlay with the user's project installed, as the baseline's, so the
    operators it registers exist in both replays; the candidate's own interpreter (and a
    note) where it cannot be installed."""
    environment = ctx.environments["candidate"]
    runner = RoleRunner(
        "candidate",
        environment,
        settings.user_command,
        UserCommand.parse(settings.user_command.command or "python"),
        ctx.import_root,
        root / "candidate",
        ctx.progress.note,
    )
    installed = runner.prepare()
    if installed.ok and runner.overlay is not None:
        return runner.overlay.python
    ctx.progress.note(
        f"calls: the user's project could not be installed for the candidate's replay "
        f"({installed.error}); replaying in the candidate without it"
    )
    return environment.python


def _release_text(ctx: RunContext) -> ReleaseText | None:
    """The words of the release the run's diff reads (the claims pack, extra probe modules
    included, and its notes files: the outputs ``release_notes`` and ``probe_modules``), or
    None when no section offers release notes (the run has no diff)."""
    notes = ctx.plan.outputs.get(RELEASE_NOTES)
    if notes is None:
        return None
    return release_text(tuple(notes), tuple(ctx.plan.outputs.get(PROBE_MODULES, ())))


def _replay_all(
    ctx: RunContext,
    settings: CallsSettings,
    recordings: list[_Recording],
    pythons: dict[str, str],
) -> None:
    """Every recording replayed in the three roles, as many at once as there are CPUs: each
    replay is its own processes, and mostly waits on importing torch. Each runs in its
    version's overlay (``pythons``: baseline, candidate), where the user's project is
    installed. Progress counts the replayed calls as their lines land, so a long replay
    shows its time left."""
    jobs = [(recording, role) for recording in recordings for role in REPLAYS]
    total = sum(len(_read_lines(r.folder / "calls.jsonl")) for r in recordings) * len(REPLAYS)

    def replay(job: tuple[_Recording, str]) -> None:
        recording, replay_role = job
        env_role = "candidate" if replay_role == "candidate" else "baseline"
        extra = settings.candidate_env if replay_role == "candidate" else {}
        python = pythons[env_role]
        _replay(python, ctx.import_root, recording.folder, replay_role, settings, extra)

    def replayed() -> int:
        return sum(_line_count(r.folder / f"replay-{role}.jsonl") for r, role in jobs)

    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with (
        ctx.progress.task(f"calls: {total} replays (baseline, control, candidate)", total) as task,
        ThreadPoolExecutor(workers) as pool,
    ):
        pending = {pool.submit(replay, job) for job in jobs}
        seen = 0
        while pending:
            finished, pending = wait(pending, timeout=_PROGRESS_EVERY_S)
            for future in finished:
                future.result()
            now = replayed()
            if now > seen:
                task.advance(f"{now} calls replayed", now - seen)
                seen = now


def _line_count(path: Path) -> int:
    if not path.is_file():
        return 0
    with open(path, "rb") as lines:
        return sum(1 for _ in lines)


def _compare(
    ctx: RunContext,
    settings: CallsSettings,
    recording: _Recording,
    counts: dict[str, int],
    metadata_only: dict[str, int],
    notes: ReleaseText | None,
) -> list[dict[str, Any]]:
    """Judge each call of one replayed recording and store the changed ones; returns its
    calls (``counts`` gains their verdicts, ``metadata_only`` why values went uncompared)."""
    calls = _read_lines(recording.folder / "calls.jsonl")
    uninitialised = {
        c["id"] for c in calls if any("empty" in p for p in str(c["callable"]).split(".")[-2:])
    }
    replays = {
        role: _by_id(recording.folder / f"replay-{role}.jsonl", uninitialised) for role in REPLAYS
    }
    values = _values(recording.folder / "values.bin")
    seed = json.loads((recording.folder / "meta.json").read_text()).get("seed")
    for call in calls:
        found = compare_call(
            replays["baseline"].get(call["id"]),
            replays["candidate"].get(call["id"]),
            control=replays["control"].get(call["id"]),
            why_not=None if call.get("replayable", True) else str(call.get("why_not")),
            recorded=call.get("outcome") or {},
        )
        counts[found.verdict.value] = counts.get(found.verdict.value, 0) + 1
        if found.metadata_only is not None:
            metadata_only[found.metadata_only] = metadata_only.get(found.metadata_only, 0) + 1
        if found.verdict is not CallVerdict.SAME:
            change = _change(call, found, Path(settings.user_command.cwd), recording.tag)
            if found.verdict in SHOWN:  # a script can show it: keep what it needs
                change = dataclasses.replace(change, extra=_kept(call, replays, values, seed))
            words = notes.naming(change.callable) if notes is not None else ()
            if notes is not None and words:
                announced = {"notes": ", ".join(words)}
                quote = notes.quote(words)
                if quote:
                    announced["notes_say"] = quote
                change = dataclasses.replace(change, announced=announced)
            _save(ctx, change)
    return calls


def _replay(
    python: str,
    import_root: Path,
    recording: Path,
    role: str,
    settings: CallsSettings,
    extra: dict[str, str],
) -> None:
    """Replay every call with ``python`` (an overlay's); a crashing call costs that call
    alone."""
    output = recording / f"replay-{role}.jsonl"
    argv = [python, "-m", CALLS_REPLAY_MAIN, str(recording), str(output)]
    argv += ["--timeout", str(settings.replay_timeout_s)]
    env = {"PYTHONPATH": str(import_root), "OMP_NUM_THREADS": "1", **extra}
    run_command(
        argv,
        cwd=Path(settings.user_command.cwd),
        env=env,
        timeout_s=settings.user_command.timeout_s,
        log_path=recording / f"replay-{role}.log",
    )


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_id(path: Path, uninitialised: set[Any]) -> dict[Any, Replay]:
    """Each call's replay; the values of ``torch.empty`` and kin are garbage, not compared."""
    values = path.with_suffix(".values.bin")  # the large outputs' values (worker/replay)
    return {
        line["id"]: Replay.from_json(line, line["id"] not in uninitialised, values)
        for line in _read_lines(path)
    }


def _values(path: Path) -> bytes | mmap.mmap:
    """The recording's values, mapped rather than read: a recording keeps every sampled
    call's arguments, whatever their size."""
    if not path.is_file() or path.stat().st_size == 0:
        return b""
    with open(path, "rb") as stream:
        return mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)


def _kept(
    call: Mapping[str, Any],
    replays: Mapping[str, Mapping[Any, Replay]],
    values: bytes | mmap.mmap,
    seed: int | None,
) -> dict[str, Any]:
    """What ``torchcanary repro`` reads from a changed call's row: the call (its small
    arguments' values inline) and what the baseline and candidate replays did."""
    observed = {
        role: replays[role][call["id"]].describe()
        for role in ("baseline", "candidate")
        if call["id"] in replays[role]
    }
    return {"call": kept_call(call, values, seed), "observed": observed}


def _change(
    call: Mapping[str, Any], found: CallComparison, project: Path, tag: str = ""
) -> CallChange:
    site = call.get("site") or {}
    file = Path(str(site.get("file", "?")))
    shown = file.relative_to(project) if file.is_relative_to(project) else file
    where = f"{shown}:{site.get('line', '?')}"
    return CallChange(
        key=f"{where} {call['callable']}#{tag}{call['id']}",
        verdict=found.verdict,
        site=where,
        callable=str(call["callable"]),
        level=str(call.get("level", "api")),
        signature=str(call.get("signature", "")),
        count=int(call.get("count", 1)),
        detail=found.detail,
        new_warnings=tuple(found.new_warnings),
        gone_warnings=tuple(found.gone_warnings),
        max_rel_err=found.max_rel_err,
    )


def _save(ctx: RunContext, record: CallChange | CallsSummary) -> None:
    ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))


def blocking_reasons(view: Any, policy: dict[str, Any]) -> list[str]:
    """Why the calls say no-go: calls whose verdict ``calls_block_on`` lists."""
    block_on = set(policy.get("calls_block_on", POLICY_DEFAULTS["calls_block_on"]))
    records = from_rows(view.sections.get(SECTION, []))
    reasons = _too_few_compared(records, policy)
    blocked = [r for r in records if isinstance(r, CallChange) and r.verdict.value in block_on]
    if blocked:
        named = "; ".join(r.sentence() for r in blocked[:3])
        more = f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
        reasons.append(f"calls: {len(blocked)} call(s) changed behaviour: {named}{more}")
    return reasons


def _too_few_compared(records: list[Any], policy: dict[str, Any]) -> list[str]:
    """A checked call set compared by value below ``calls_min_compared`` says too little
    for a go (one not checked is already held back by the core, ``accounting.py``)."""
    minimum = float(policy.get("calls_min_compared", POLICY_DEFAULTS["calls_min_compared"]))
    summary = next((r for r in records if isinstance(r, CallsSummary)), None)
    if summary is None or summary.verdict.value not in CHECKED_VERDICTS:
        return []
    share = summary.compared_share()
    if share is None or share >= minimum:
        return []
    return [
        f"calls: only {share:.0%} of the {summary.recorded} recorded call(s) were compared by "
        f"value ({summary.compared_by_value}), under calls_min_compared ({minimum:.0%})"
    ]
