"""Section "calls": the torch calls your code makes, recorded and replayed in both versions.

``run(ctx)``: the user's command (the stack's: same settings, same overlay machinery) runs
once in the baseline with the recording plugin on (``worker/replay``: every distinct torch
call, its site and its small tensor arguments); then the recording is replayed, one call
at a time in a process that may die, in the baseline, in the baseline again (the control)
and in the candidate; ``compare.compare_call`` judges each call. Replays need only torch,
so they run in the cached environments themselves.

Rows (section ``calls``; typed records in ``calls/result.py``): ``__summary__`` with the
counts, and one row per call whose verdict is not ``same``.

Policy keys (defaults):
  calls_block_on = ["raises-now"]   the verdicts that make the run a no-go
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchcanary.calls.compare import CallComparison, CallVerdict, Replay, compare_call
from torchcanary.calls.result import (
    CallChange,
    CallsSummary,
    SummaryStatus,
    from_rows,
)
from torchcanary.calls.settings import CallsSettings
from torchcanary.context import RunContext
from torchcanary.envs.cache import Environment
from torchcanary.stack.command import UserCommand
from torchcanary.stack.execute import RoleRunner
from torchcanary.stack.session import run_command
from torchcanary.store.rows import SectionResult
from torchcanary.worker.calls import CALLS_RECORD_PLUGIN, CALLS_RECORD_VAR, CALLS_REPLAY_MAIN

SECTION = "calls"
REPLAYS = ("baseline", "control", "candidate")  # control: the baseline again
POLICY_DEFAULTS: dict[str, Any] = {"calls_block_on": ["raises-now"]}
POLICY_CHOICES = {"calls_block_on": tuple(v.value for v in CallVerdict)}


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``[calls]``: the stack's keys, plus ``candidate_env`` and ``replay_timeout_s``."""
    return CallsSettings.parse(mapping).to_json()


def run(ctx: RunContext) -> None:
    settings = CallsSettings.from_json(ctx.plan.section_settings(SECTION))
    if not settings.stack.command:
        _save(ctx, CallsSummary(SummaryStatus.NOT_CHECKED, reason="no command given"))
        return
    root = ctx.work_dir / SECTION
    recording = root / "recording"
    recording_run = _record(ctx, settings, recording, root / "baseline")
    if not (recording / "calls.jsonl").is_file():
        reason = f"no recording was written ({recording_run}; see {root / 'baseline'})"
        summary = CallsSummary(SummaryStatus.NOT_CHECKED, settings.stack.command, reason)
        _save(ctx, summary)
        return
    for replay_role in REPLAYS:
        env_role = "candidate" if replay_role == "candidate" else "baseline"
        extra = settings.candidate_env if replay_role == "candidate" else {}
        _replay(
            ctx.environments[env_role], ctx.import_root, recording, replay_role, settings, extra
        )
    calls = _read_lines(recording / "calls.jsonl")
    uninitialised = {
        c["id"] for c in calls if any("empty" in p for p in str(c["callable"]).split(".")[-2:])
    }
    replays = {role: _by_id(recording / f"replay-{role}.jsonl", uninitialised) for role in REPLAYS}
    counts: dict[str, int] = {}
    for call in calls:
        found = compare_call(
            replays["baseline"].get(call["id"]),
            replays["candidate"].get(call["id"]),
            control=replays["control"].get(call["id"]),
            why_not=None if call.get("replayable", True) else str(call.get("why_not")),
        )
        counts[found.verdict.value] = counts.get(found.verdict.value, 0) + 1
        if found.verdict is not CallVerdict.SAME:
            _save(ctx, _change(call, found, Path(settings.stack.cwd)))
    not_replayable: dict[str, int] = {}
    for call in calls:
        if not call.get("replayable", True):
            why = str(call.get("why_not"))
            not_replayable[why] = not_replayable.get(why, 0) + 1
    changed = sum(n for v, n in counts.items() if v not in ("same", "not-replayable"))
    summary = CallsSummary(
        SummaryStatus.CHANGES if changed else SummaryStatus.NO_CHANGES,
        settings.stack.command,
        recording_run=recording_run,
        recorded=len(calls),
        replayed=len(calls) - counts.get("not-replayable", 0),
        not_replayable=not_replayable,
        counts=counts,
    )
    _save(ctx, summary)
    ctx.progress.note(f"calls: {len(calls)} recorded, {summary.replayed} replayed, {counts}")


def _record(ctx: RunContext, settings: CallsSettings, recording: Path, root: Path) -> str:
    """The user's command once in the baseline, the recording plugin loaded by pytest; how
    it ended (a test that fails only while recorded is a limit of the recording to know)."""
    recording.mkdir(parents=True, exist_ok=True)
    env = {
        **settings.stack.env,
        CALLS_RECORD_VAR: str(recording),
        "PYTEST_PLUGINS": CALLS_RECORD_PLUGIN,
    }
    stack_settings = dataclasses.replace(settings.stack, env=env)
    runner = RoleRunner(
        "baseline",
        ctx.environments["baseline"],
        stack_settings,
        UserCommand.parse(settings.stack.command),
        ctx.import_root,
        root,
        ctx.progress.note,
    )
    recorded = runner.run_main(runner.prepare())
    ended = f"{recorded.status}: {recorded.detail}"
    ctx.progress.note(f"calls: recorded under the baseline: {ended}")
    return ended


def _replay(
    environment: Environment,
    import_root: Path,
    recording: Path,
    role: str,
    settings: CallsSettings,
    extra: dict[str, str],
) -> None:
    """Replay every call in ``environment``; a crashing call costs that call alone."""
    output = recording / f"replay-{role}.jsonl"
    argv = [environment.python, "-m", CALLS_REPLAY_MAIN, str(recording), str(output)]
    argv += ["--timeout", str(settings.replay_timeout_s)]
    env = {"PYTHONPATH": str(import_root), "OMP_NUM_THREADS": "1", **extra}
    run_command(
        argv,
        cwd=Path(settings.stack.cwd),
        env=env,
        timeout_s=settings.stack.timeout_s,
        log_path=recording / f"replay-{role}.log",
    )


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_id(path: Path, uninitialised: set[Any]) -> dict[Any, Replay]:
    """Each call's replay; the values of ``torch.empty`` and kin are garbage, not compared."""
    return {
        line["id"]: Replay.from_json(line, line["id"] not in uninitialised)
        for line in _read_lines(path)
    }


def _change(call: Mapping[str, Any], found: CallComparison, project: Path) -> CallChange:
    site = call.get("site") or {}
    file = Path(str(site.get("file", "?")))
    shown = file.relative_to(project) if file.is_relative_to(project) else file
    where = f"{shown}:{site.get('line', '?')}"
    return CallChange(
        key=f"{where} {call['callable']}#{call['id']}",
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
    blocked = [r for r in records if isinstance(r, CallChange) and r.verdict.value in block_on]
    if not blocked:
        return []
    named = "; ".join(r.sentence() for r in blocked[:3])
    more = f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
    return [f"calls: {len(blocked)} call(s) changed behaviour: {named}{more}"]
