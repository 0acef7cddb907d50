"""Pillar "your stack": the user's own test suite or script in both environments, diffed.

``run(ctx)``: for each role, build an overlay on the cached torch environment, install the
user's project and extras into it, and run the command once; each role's run is stored as
soon as it ends (a summary row, and the full record as artifact ``stack/<role>.json``, which
``--resume`` reuses). Then the runs are compared, what newly broke is re-run in both, the
recorded tensors are compared, and every change is stored with a summary row.

Rows (section ``stack``; their typed records are in ``stack/result.py``):
  key ``__summary__``, env_role baseline|candidate: verdict is how the run ended (passed,
    failed, crashed, timeout, not-found, install-failed, pytest-error, no-tests); payload:
    outcome counts, exit code, duration, install, output tails, stragglers killed.
  key ``__summary__``, env_role ``both``: verdict changes|no-changes|not-compared; payload:
    counts per verdict (``unchanged`` included), tests seen in one run only, re-run keys.
  key <test id>|``command``|``numerics:<name>``, env_role ``both``: verdict one of
    ``result.ChangeVerdict``; payload: both sides, detail, deterministic, reruns, durations,
    first_differing_lines, new_warnings, numerics.

Policy keys for ``blocking_reasons`` (defaults):
  stack_max_new_failures = 0          new failures/errors allowed that are deterministic
                                      (or were not re-run)
  stack_block_on_flaky = False        flaky new failures block as well
  stack_block_on_numeric_drift = False
  stack_block_on_new_warnings = False
  stack_block_on_slower = False
  stack_block_on_newly_skipped = False
  stack_block_on_lost_tests = "passed"  tests that ran in the baseline and not in the
                                      candidate (newly skipped or missing) block: "passed"
                                      (those that passed there), "any", or "never"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from torchcanary.context import ROLES, RunContext
from torchcanary.plan import RunPlan
from torchcanary.results import ComparisonStatus
from torchcanary.section_types import PlannedUnit, PolicyBounds
from torchcanary.stack.compare import compare_runs
from torchcanary.stack.result import (
    RunStatus,
    StackChange,
    StackRecord,
    StackSummary,
    from_json,
    from_rows,
)
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult
from torchcanary.user_command import settings as command_settings
from torchcanary.user_command.command import UserCommand
from torchcanary.user_command.execute import RoleRunner
from torchcanary.user_command.records import EnvRun
from torchcanary.user_command.settings import CommandSettings

SECTION = "stack"
# A suite checked in an environment ran its tests to the end (failures are findings); the
# comparison is checked when it was made. Anything else (crashed, timeout, not found, no
# tests, not compared) is not.
CHECKED_VERDICTS = frozenset(
    status.value
    for status in (
        RunStatus.PASSED,
        RunStatus.FAILED,
        ComparisonStatus.CHANGES,
        ComparisonStatus.NO_CHANGES,
    )
)
POLICY_DEFAULTS: dict[str, Any] = {
    "stack_max_new_failures": 0,
    "stack_block_on_flaky": False,
    "stack_block_on_numeric_drift": False,
    "stack_block_on_new_warnings": False,
    "stack_block_on_slower": False,
    "stack_block_on_newly_skipped": False,
    "stack_block_on_lost_tests": "passed",
}
# Coverage the candidate lost blocks: where a test that passed in the baseline did not
# run in the candidate, where any test that ran there did not, or never (shown all the same).
LOST_TESTS_BLOCK = ("passed", "any", "never")
POLICY_CHOICES: dict[str, tuple[str, ...]] = {"stack_block_on_lost_tests": LOST_TESTS_BLOCK}
# Numbers a policy may set, refused at load when outside.
POLICY_BOUNDS: dict[str, PolicyBounds] = {
    "stack_max_new_failures": PolicyBounds(0, None, "a count of tests"),
}
_OPTIONAL_BLOCKS = (
    ("numeric-drift", "stack_block_on_numeric_drift", "drifted numerically"),
    ("new-warning", "stack_block_on_new_warnings", "with new warnings"),
    ("slower", "stack_block_on_slower", "slower"),
    ("newly-skipped", "stack_block_on_newly_skipped", "newly skipped"),
)


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``[tool.torchcanary.stack]`` (see ``user_command/settings.py`` for the keys)."""
    return command_settings.parse_settings(mapping, table=SECTION)


def _artifact_name(role: str) -> str:
    return f"stack/{role}.json"


def _stored_run(ctx: RunContext, role: str) -> EnvRun | None:
    for name, _, content in ctx.store.artifacts(ctx.run_id):
        if name == _artifact_name(role):
            return EnvRun.from_json(json.loads(content))
    return None


def run(ctx: RunContext) -> None:
    settings = CommandSettings.from_json(ctx.plan.section_settings(SECTION))
    if not settings.command:
        ctx.progress.note("stack: no command given (e.g. --stack 'pytest tests/'); skipped")
        return
    done = ctx.store.done_section_keys(ctx.run_id, SECTION) if ctx.resume else set()
    if (SUMMARY_KEY, BOTH) in done:
        return
    command = UserCommand.parse(settings.command)
    runners = {
        role: RoleRunner(
            role,
            ctx.environments[role],
            settings,
            command,
            ctx.import_root,
            ctx.work_dir / SECTION / role,
            ctx.progress.note,
        )
        for role in ROLES
    }
    runs: dict[str, EnvRun] = {}
    for role in ROLES:
        stored = _stored_run(ctx, role) if (SUMMARY_KEY, role) in done else None
        if stored is None:
            runner = runners[role]
            stored = runner.run_main(runner.prepare())
            ctx.store.save_artifact(
                ctx.run_id,
                _artifact_name(role),
                "application/json",
                json.dumps(stored.to_json()).encode(),
            )
            _save(ctx, SUMMARY_KEY, role, stored.status, stored.summary())
        ctx.progress.note(f"stack: {role}: {stored.status}: {stored.detail}")
        runs[role] = stored
    comparison = compare_runs(runs["baseline"], runs["candidate"], runners, settings)
    for change in comparison.changes:
        _save(ctx, change.key, BOTH, change.verdict, change.payload())
    verdict = (
        ComparisonStatus.NOT_COMPARED
        if not comparison.compared
        else ComparisonStatus.CHANGES
        if comparison.changes
        else ComparisonStatus.NO_CHANGES
    )
    _save(ctx, SUMMARY_KEY, BOTH, verdict.value, comparison.summary)
    ctx.progress.note(f"stack: {verdict} ({len(comparison.changes)} change(s))")


def _save(ctx: RunContext, key: str, role: str, verdict: str, payload: dict[str, Any]) -> None:
    """Store one row as its typed record (which checks the verdict is one of its enum's)."""
    record = from_json({"key": key, "env_role": role, "verdict": verdict, "payload": payload})
    ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))


def _listed(rows: list[StackChange], limit: int = 5) -> str:
    names = ", ".join(row.key for row in rows[:limit])
    return names + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def policy_rules(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stack keys of ``policy``, defaults filled in: one reading for gate and JUnit."""
    return {**POLICY_DEFAULTS, **(policy or {})}


def blocking_changes(changes: list[StackChange], rules: Mapping[str, Any]) -> set[str]:
    """The keys of the per-test changes that stop the run under ``rules``.

    The gate and the JUnit cases both read this, so a test case fails exactly when its
    change is part of a no-go (breaks within ``stack_max_new_failures`` pass).
    """
    breaks = [r for r in changes if r.verdict.is_new_break]
    hard = [r for r in breaks if r.blocks_as_new_break]
    blocked = {r.key for r in hard} if len(hard) > int(rules["stack_max_new_failures"]) else set()
    if rules["stack_block_on_flaky"]:
        blocked |= {r.key for r in breaks if not r.blocks_as_new_break}
    for verdict, key, _words in _OPTIONAL_BLOCKS:
        if rules[key]:
            blocked |= {r.key for r in changes if verdict in r.findings}
    return blocked


def _lost_coverage(summary: StackSummary, block: str) -> list[str]:
    """The candidate's lost coverage, counted and named, where ``block`` says it blocks."""
    passed, any_lost = summary.lost_passed_count or 0, summary.lost_count or 0
    if block == "passed" and passed:
        names = _names(summary.lost_passed or (), passed)
        return [
            f"stack: {passed} test(s) that passed in the baseline did not run in the "
            f"candidate (newly skipped or missing): {names}"
        ]
    if block == "any" and any_lost:
        names = _names(summary.lost or (), any_lost)
        return [
            f"stack: {any_lost} test(s) that ran in the baseline did not run in the "
            f"candidate (newly skipped or missing): {names}"
        ]
    return []


def _names(listed: tuple[str, ...], count: int, limit: int = 5) -> str:
    shown = ", ".join(listed[:limit])
    return shown + (f" and {count - len(listed[:limit])} more" if count > limit else "")


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """The command (the suite) in each environment, and their comparison."""
    return [PlannedUnit(SUMMARY_KEY, role) for role in (*ROLES, BOTH)]


def blocking_reasons(view: Any, policy: dict[str, Any]) -> list[str]:
    """Why the stack says no-go under ``policy`` (keys and defaults in the module docstring)."""
    rules = policy_rules(policy)
    records: list[StackRecord] = from_rows(view.sections.get(SECTION, []))
    if not records:
        return []
    summary = next((r for r in records if isinstance(r, StackSummary)), None)
    if summary is None:
        return ["stack: the comparison did not finish; run again with --resume"]
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return []  # the command could not run: the core's rule (``accounting.py``)
    changes = [r for r in records if isinstance(r, StackChange) and r.env_role == BOTH]
    breaks = [r for r in changes if r.verdict.is_new_break]
    hard = [r for r in breaks if r.blocks_as_new_break]
    flaky = [r for r in breaks if not r.blocks_as_new_break]
    reasons = []
    if len(hard) > int(rules["stack_max_new_failures"]):
        reasons.append(
            f"stack: {len(hard)} new failure(s) in the candidate that re-runs did "
            f"not clear (allowed {rules['stack_max_new_failures']}): {_listed(hard)}"
        )
    if flaky and rules["stack_block_on_flaky"]:
        reasons.append(f"stack: {len(flaky)} flaky new failure(s): {_listed(flaky)}")
    reasons += _lost_coverage(summary, str(rules["stack_block_on_lost_tests"]))
    for verdict, key, words in _OPTIONAL_BLOCKS:
        found = [r for r in changes if verdict in r.findings]
        if found and rules[key]:
            reasons.append(f"stack: {len(found)} test(s) {words}: {_listed(found)}")
    return reasons
