"""From two environments' runs to the findings that are stored: diff, re-runs, numerics.

The diff names what changed; then whatever newly broke in the candidate, and the tests whose
timing looks different, are run again ``reruns`` times in both environments (alternating,
baseline first) so determinism and timing rest on several samples; finally the tensors the
user's code recorded are compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from torchcanary.numerics_diff import compare_directories
from torchcanary.stack.diff import (
    ABSENT,
    BehaviourChange,
    Thresholds,
    diff_commands,
    diff_suites,
    numeric_change,
    settle_reruns,
    suite_end_change,
    timing_verdict,
)
from torchcanary.user_command.records import COMMAND_KEY, PASSING, EnvRun, TestRecord
from torchcanary.user_command.settings import CommandSettings

_RERUN_FLOOR_S = 60.0  # start-up and collection of a re-run, before any test runs
_RERUN_FACTOR = 5.0
_LISTED = 50  # test ids listed in the summary per category; the count is always exact


class Rerunner(Protocol):
    def rerun(self, keys: list[str], timeout_s: float, round_no: int) -> dict[str, TestRecord]: ...


@dataclass(frozen=True)
class StackComparison:
    compared: bool
    reason: str
    changes: list[BehaviourChange]
    summary: dict[str, Any]


def thresholds_of(settings: CommandSettings) -> Thresholds:
    return Thresholds(settings.slower_ratio, settings.timing_min_s, settings.warning_kinds)


def _duration(run: EnvRun, key: str) -> float:
    if key == COMMAND_KEY:
        return run.command.duration_s if run.command else 0.0
    record = run.tests.get(key)
    return record.duration_s if record and record.outcome != "timeout" else 0.0


def _log_ratio(baseline: EnvRun, candidate: EnvRun, key: str) -> float:
    low, high = _duration(baseline, key), _duration(candidate, key)
    return abs(math.log(max(high, 1e-6) / max(low, 1e-6)))


def compare_runs(
    baseline: EnvRun, candidate: EnvRun, runners: Mapping[str, Rerunner], settings: CommandSettings
) -> StackComparison:
    """The changes between the two runs, re-run and settled, with a summary."""
    summary: dict[str, Any] = {
        "command": settings.command,
        "pytest": candidate.pytest,
        "reruns": settings.reruns,
    }
    if not baseline.ran or not candidate.ran:
        reason = "; ".join(
            f"the {run.role} did not run ({run.status}): {run.detail}"
            for run in (baseline, candidate)
            if not run.ran
        )
        return StackComparison(False, reason, [], {**summary, "reason": reason})
    changes, breaks, suspects, unchanged = _first_changes(baseline, candidate, settings, summary)
    suspects = sorted(suspects, key=lambda k: -_log_ratio(baseline, candidate, k))
    suspects = suspects[: settings.timing_max_tests]
    changes = _rerun_and_settle(baseline, candidate, runners, settings, changes, breaks, suspects)
    comparisons = compare_directories(
        Path(baseline.numerics_dir),
        Path(candidate.numerics_dir),
        rtol=settings.numerics_rtol,
        atol=settings.numerics_atol,
        max_ulps=settings.numerics_max_ulps,
    )
    drifted = [c for c in map(numeric_change, comparisons) if c is not None]
    changes.extend(drifted)
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.verdict] = counts.get(change.verdict, 0) + 1
    counts["unchanged"] = unchanged
    summary.update(
        {
            "counts": counts,
            "rerun_keys": breaks + suspects,
            "deterministic_breaks": sum(
                c.is_new_break and c.deterministic is True for c in changes
            ),
            "flaky": sum(c.is_new_break and c.deterministic is False for c in changes),
            "numerics": {
                "compared": len(comparisons),
                "drift": len(drifted),
                "names": [c.to_json() for c in comparisons][:_LISTED],
            },
        }
    )
    return StackComparison(True, "", changes, summary)


def _first_changes(
    baseline: EnvRun, candidate: EnvRun, settings: CommandSettings, summary: dict[str, Any]
) -> tuple[list[BehaviourChange], list[str], list[str], int]:
    """What differs on the first run of each side, before any re-run: the changes, the
    new breaks and timing suspects to re-run, and how many tests did not change. A pytest
    run adds the tests found on one side only to ``summary``."""
    thresholds = thresholds_of(settings)
    if not candidate.pytest:
        change, suspect = diff_commands(baseline, candidate, thresholds)
        breaks = [COMMAND_KEY] if change and change.is_new_break else []
        return [change] if change else [], breaks, [COMMAND_KEY] if suspect else [], int(not change)
    suite = diff_suites(baseline, candidate, thresholds)
    changes = list(suite.changes)
    summary.update(
        {
            "only_in_baseline": suite.only_in_baseline[:_LISTED],
            "only_in_baseline_count": len(suite.only_in_baseline),
            "only_in_candidate": suite.only_in_candidate[:_LISTED],
            "only_in_candidate_count": len(suite.only_in_candidate),
            "lost": suite.lost[:_LISTED],
            "lost_count": len(suite.lost),
            "lost_passed": suite.lost_passed[:_LISTED],
            "lost_passed_count": len(suite.lost_passed),
        }
    )
    breaks = [c.key for c in changes if c.is_new_break]
    ended = suite_end_change(baseline, candidate)
    if ended is not None:
        changes.append(ended)  # the whole run's end; its tests are re-run one by one
    return changes, breaks, list(suite.timing_suspects), suite.unchanged


def _rerun_and_settle(
    baseline: EnvRun,
    candidate: EnvRun,
    runners: Mapping[str, Rerunner],
    settings: CommandSettings,
    changes: list[BehaviourChange],
    breaks: list[str],
    suspects: list[str],
) -> list[BehaviourChange]:
    keys = list(dict.fromkeys(breaks + suspects))
    if not keys or settings.reruns == 0:
        return changes
    budget = _RERUN_FLOOR_S + _RERUN_FACTOR * sum(
        max(_duration(baseline, k), _duration(candidate, k)) for k in keys
    )
    timeout_s = min(settings.timeout_s, budget)
    samples: dict[str, dict[str, list[TestRecord | None]]] = {
        role: {key: [] for key in keys} for role in ("baseline", "candidate")
    }
    for round_no in range(1, settings.reruns + 1):
        for role in ("baseline", "candidate"):
            results = runners[role].rerun(keys, timeout_s, round_no)
            for key in keys:
                samples[role][key].append(results.get(key))
    by_key = {change.key: change for change in changes}
    for key in breaks:
        outcomes = {
            role: [r.outcome if r else ABSENT for r in samples[role][key]] for role in samples
        }
        by_key[key] = settle_reruns(by_key[key], outcomes["baseline"], outcomes["candidate"])
    thresholds = thresholds_of(settings)
    for key in suspects:
        durations = {
            role: [_duration(run, key)]
            + [r.duration_s for r in samples[role][key] if r and r.outcome in PASSING]
            for role, run in (("baseline", baseline), ("candidate", candidate))
        }
        found = timing_verdict(durations["baseline"], durations["candidate"], thresholds)
        if found is None:
            continue
        verdict, detail = found
        if key in by_key:
            by_key[key] = replace(by_key[key].with_verdict(verdict, detail), durations=durations)
        else:
            by_key[key] = BehaviourChange(
                key,
                verdict,
                detail,
                _timed(baseline, key),
                _timed(candidate, key),
                durations=durations,
            )
    ordered = [by_key.pop(change.key) for change in changes if change.key in by_key]
    return ordered + list(by_key.values())


def _timed(run: EnvRun, key: str) -> dict[str, Any]:
    record = run.tests.get(key)
    outcome = record.outcome if record else run.status
    return {"outcome": outcome, "duration_s": round(_duration(run, key), 4), "message": ""}
