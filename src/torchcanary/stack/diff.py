"""What changed between the baseline's and the candidate's run of the same suite. Pure.

Per test, the outcome transition gives the verdict: newly failing, newly erroring (an error
in setup or collection, a crash, a timeout), newly passing, newly skipped. A test may also
gain deprecation or user warnings in the candidate, or (after re-runs) become slower or
faster beyond noise. One key gets one verdict, the most serious (``VERDICTS`` order), with
the others listed in ``also``. New failures are marked for re-runs, which then decide
whether the break is deterministic: it is when every re-run fails in the candidate and
passes in the baseline. Timing needs re-runs too: a test is slower only when the median
ratio passes the threshold and every candidate sample is slower than every baseline one.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from torchcanary.numerics_diff import NumericComparison
from torchcanary.stack.result import ChangeVerdict
from torchcanary.user_command.records import (
    BROKEN,
    COMMAND_KEY,
    FAILING,
    NOT_A_TEST,
    PASSING,
    SKIPPED,
    EnvRun,
    TestRecord,
    WarningRecord,
    normalise,
)

VERDICTS = tuple(verdict.value for verdict in ChangeVerdict)  # most serious first
NEW_BREAKS = tuple(verdict.value for verdict in ChangeVerdict if verdict.is_new_break)
ABSENT = "absent"  # a test a run did not report: not collected, or not reached
# A side's kept traceback: room for a deep pytest traceback, small beside a row's other text.
TRACEBACK_CHARS = 8_000
_TRACEBACK_HEAD = 2_000  # of which the head (where the test went in); the rest is the tail


@dataclass(frozen=True)
class Thresholds:
    slower_ratio: float = 1.5
    timing_min_s: float = 0.1
    warning_kinds: tuple[str, ...] = ("deprecation", "user")


@dataclass(frozen=True)
class BehaviourChange:
    """One key whose behaviour differs between the environments (the store keeps these)."""

    key: str
    verdict: str
    detail: str
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    also: tuple[str, ...] = ()
    new_warnings: tuple[dict[str, str], ...] = ()
    first_differing_lines: dict[str, Any] = field(default_factory=dict)
    deterministic: bool | None = None  # None: not re-run (or not a new break)
    reruns: dict[str, list[str]] = field(default_factory=dict)
    durations: dict[str, list[float]] = field(default_factory=dict)
    numerics: dict[str, Any] | None = None

    @property
    def is_new_break(self) -> bool:
        return self.verdict in NEW_BREAKS

    def with_verdict(self, verdict: str, detail: str) -> BehaviourChange:
        """Add a finding: the more serious verdict leads, the other joins ``also``."""
        if VERDICTS.index(verdict) < VERDICTS.index(self.verdict):
            return dataclasses.replace(
                self, verdict=verdict, detail=detail, also=(self.verdict, *self.also)
            )
        return dataclasses.replace(self, also=(*self.also, verdict))

    def payload(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("key")
        data.pop("verdict")
        return data


@dataclass(frozen=True)
class SuiteDiff:
    changes: list[BehaviourChange]
    unchanged: int
    only_in_baseline: list[str]
    only_in_candidate: list[str]
    timing_suspects: list[str]
    # Coverage the candidate lost: tests that ran in the baseline (passed, failed or broke)
    # and did not run in the candidate (newly skipped, or missing); those that passed.
    lost: list[str] = dataclasses.field(default_factory=list)
    lost_passed: list[str] = dataclasses.field(default_factory=list)


def transition(baseline: str | None, candidate: str | None) -> str | None:
    """The verdict for one test's outcome moving from ``baseline`` to ``candidate``."""
    if candidate in BROKEN and baseline not in BROKEN:
        return "newly-erroring"
    if candidate in FAILING and (baseline in PASSING or baseline in SKIPPED or baseline is None):
        return "newly-failing"
    if candidate in PASSING and (baseline in FAILING or baseline in BROKEN or baseline in SKIPPED):
        return "newly-passing"
    if candidate is None and (baseline in FAILING or baseline in BROKEN):
        return "newly-passing"  # e.g. a module that failed to collect now collects
    if candidate in SKIPPED and (baseline in PASSING or baseline in FAILING or baseline in BROKEN):
        return "newly-skipped"
    return None


def bounded(text: str, limit: int = TRACEBACK_CHARS) -> str:
    """``text`` whole, or its head and tail when longer than ``limit``: the first frames
    say where the test went in, the last where it failed."""
    if len(text) <= limit:
        return text
    tail = limit - _TRACEBACK_HEAD
    left_out = len(text) - limit
    return f"{text[:_TRACEBACK_HEAD]}\n... {left_out} characters left out ...\n{text[-tail:]}"


def _side(record: TestRecord | None) -> dict[str, Any]:
    """One side of a change: its outcome, time, one-line message and, where it did not
    pass, its traceback (what links a new failure to the change of torch it went through)."""
    if record is None:
        return {"outcome": ABSENT, "duration_s": 0.0, "message": "", "traceback": ""}
    failed = record.outcome not in PASSING and record.outcome not in SKIPPED
    return {
        "outcome": record.outcome,
        "duration_s": round(record.duration_s, 4),
        "message": record.message,
        "traceback": bounded(record.longrepr) if failed else "",
    }


def _failure_text(record: TestRecord | None) -> str:
    if record is None or record.outcome in PASSING or record.outcome in SKIPPED:
        return ""
    return "\n".join(part for part in (record.message, record.longrepr) if part)


def first_differing_lines(
    baseline_text: str, candidate_text: str, paths: tuple[str, ...] = (), limit: int = 8
) -> dict[str, Any]:
    """Where two failure texts (or outputs) part ways: a few lines of each from there.

    When only one side failed, its error lines (pytest's ``E`` lines) or last lines stand
    for the difference.
    """
    base_lines, cand_lines = baseline_text.splitlines(), candidate_text.splitlines()
    if not base_lines or not cand_lines:
        lines = cand_lines or base_lines
        errors = [line for line in lines if line.startswith("E ")]
        shown = (errors or lines[-limit:])[:limit]
        side = "candidate" if cand_lines else "baseline"
        return {"line": None, side: shown} if shown else {}
    base_norm = [normalise(line, paths) for line in base_lines]
    cand_norm = [normalise(line, paths) for line in cand_lines]
    for index in range(max(len(base_norm), len(cand_norm))):
        if (
            index >= len(base_norm)
            or index >= len(cand_norm)
            or base_norm[index] != cand_norm[index]
        ):
            start = max(0, index - 1)
            return {
                "line": index + 1,
                "baseline": base_lines[start : start + limit],
                "candidate": cand_lines[start : start + limit],
            }
    return {}


def new_warnings(
    baseline: tuple[WarningRecord, ...],
    candidate: tuple[WarningRecord, ...],
    kinds: tuple[str, ...],
) -> list[WarningRecord]:
    """Warnings of ``kinds`` the candidate raised and the baseline did not."""
    seen = {w.signature() for w in baseline}
    fresh: dict[tuple[str, str], WarningRecord] = {}
    for warning in candidate:
        if warning.kind in kinds and warning.signature() not in seen:
            fresh.setdefault(warning.signature(), warning)
    return list(fresh.values())


def _warning_change(
    key: str, found: list[WarningRecord], base: dict[str, Any], cand: dict[str, Any]
) -> BehaviourChange:
    first = found[0]
    detail = f"new {first.category}: {first.message.splitlines()[0][:160] if first.message else ''}"
    if len(found) > 1:
        detail += f" (+{len(found) - 1} more)"
    return BehaviourChange(
        key,
        "new-warning",
        detail,
        base,
        cand,
        new_warnings=tuple(dataclasses.asdict(w) for w in found),
    )


def _outcome_detail(verdict: str, base: TestRecord | None, cand: TestRecord | None) -> str:
    before = base.outcome if base else ABSENT
    after = cand.outcome if cand else ABSENT
    reason = (
        cand.message
        if cand and cand.outcome not in PASSING
        else base.message
        if base and verdict == "newly-passing"
        else ""
    )
    reason = reason.splitlines()[0][:200] if reason else ""
    return f"{before} -> {after}" + (f": {reason}" if reason else "")


def diff_suites(baseline: EnvRun, candidate: EnvRun, thresholds: Thresholds) -> SuiteDiff:
    """Per-test changes between two pytest runs that both ran."""
    paths = baseline.volatile_paths + candidate.volatile_paths
    changes: list[BehaviourChange] = []
    unchanged = 0
    only_base: list[str] = []
    only_cand: list[str] = []
    suspects: list[str] = []
    lost: list[str] = []
    lost_passed: list[str] = []
    for key in sorted(set(baseline.tests) | set(candidate.tests)):
        base, cand = baseline.tests.get(key), candidate.tests.get(key)
        base_outcome = base.outcome if base and base.outcome != NOT_A_TEST else None
        cand_outcome = cand.outcome if cand and cand.outcome != NOT_A_TEST else None
        # Coverage lost: it ran in the baseline and not in the candidate.
        if base_outcome not in (None, *SKIPPED) and (
            cand_outcome is None or cand_outcome in SKIPPED
        ):
            lost.append(key)
            if base_outcome in PASSING:
                lost_passed.append(key)
        # A test missing after a run ended early did not run: say so, not "it passes now".
        if base_outcome is None and not baseline.ended_normally and cand_outcome is not None:
            only_cand.append(key)
            continue
        if cand_outcome is None and not candidate.ended_normally and base_outcome is not None:
            only_base.append(key)
            continue
        change: BehaviourChange | None = None
        verdict = transition(base_outcome, cand_outcome)
        if verdict is not None:
            change = BehaviourChange(
                key,
                verdict,
                _outcome_detail(verdict, base, cand),
                _side(base),
                _side(cand),
                first_differing_lines=first_differing_lines(
                    _failure_text(base), _failure_text(cand), paths
                ),
            )
        elif base_outcome is None and cand_outcome is not None:
            only_cand.append(key)
        elif cand_outcome is None and base_outcome is not None:
            only_base.append(key)
        found = new_warnings(
            base.warnings if base else (), cand.warnings if cand else (), thresholds.warning_kinds
        )
        if found and (base is not None or cand_outcome is None):
            warning = _warning_change(key, found, _side(base), _side(cand))
            change = change.with_verdict("new-warning", warning.detail) if change else warning
            change = dataclasses.replace(change, new_warnings=warning.new_warnings)
        if change is not None:
            changes.append(change)
        elif base_outcome is not None and cand_outcome is not None:
            unchanged += 1
        if (
            base_outcome in PASSING
            and cand_outcome in PASSING
            and base
            and cand
            and is_timing_suspect(base.duration_s, cand.duration_s, thresholds)
        ):
            suspects.append(key)
    return SuiteDiff(changes, unchanged, only_base, only_cand, suspects, lost, lost_passed)


def is_timing_suspect(baseline_s: float, candidate_s: float, thresholds: Thresholds) -> bool:
    """Worth re-running to measure: long enough to time, and apart by the ratio."""
    if max(baseline_s, candidate_s) < thresholds.timing_min_s:
        return False
    low, high = sorted((baseline_s, candidate_s))
    return low <= 0 or high / low >= thresholds.slower_ratio


def timing_verdict(
    baseline_s: list[float], candidate_s: list[float], thresholds: Thresholds
) -> tuple[str, str] | None:
    """slower/faster with a reason, when the samples do not overlap and the ratio holds."""
    if len(baseline_s) < 3 or len(candidate_s) < 3:
        return None  # too few samples to tell a change from noise
    base_median, cand_median = statistics.median(baseline_s), statistics.median(candidate_s)
    if (
        abs(cand_median - base_median) < thresholds.timing_min_s
        or min(base_median, cand_median) <= 0
    ):
        return None
    ratio = cand_median / base_median
    detail = (
        f"median {base_median:.3f} s -> {cand_median:.3f} s ({ratio:.2f}x, "
        f"{len(baseline_s)} vs {len(candidate_s)} samples, no overlap)"
    )
    if ratio >= thresholds.slower_ratio and min(candidate_s) > max(baseline_s):
        return "slower", detail
    if ratio <= 1 / thresholds.slower_ratio and max(candidate_s) < min(baseline_s):
        return "faster", detail
    return None


def settle_reruns(
    change: BehaviourChange, baseline_outcomes: list[str], candidate_outcomes: list[str]
) -> BehaviourChange:
    """Decide deterministic or flaky from the re-run outcomes of a new break.

    ``absent`` (the re-run did not report the test) never counts as a failure.
    """
    deterministic = (
        bool(candidate_outcomes)
        and all(o not in PASSING and o != ABSENT for o in candidate_outcomes)
        and all(o in PASSING or o in SKIPPED or o == ABSENT for o in baseline_outcomes)
    )
    detail = change.detail
    if not deterministic:
        passes = sum(o in PASSING for o in candidate_outcomes)
        fails = sum(o not in PASSING and o not in SKIPPED for o in baseline_outcomes)
        detail += (
            f" [flaky: passed {passes} of {len(candidate_outcomes)} candidate re-runs, "
            f"failed {fails} of {len(baseline_outcomes)} baseline re-runs]"
        )
    return dataclasses.replace(
        change,
        deterministic=deterministic,
        detail=detail,
        reruns={"baseline": baseline_outcomes, "candidate": candidate_outcomes},
    )


def _command_side(run: EnvRun) -> dict[str, Any]:
    command = run.command
    return {
        "outcome": run.status,
        "duration_s": round(command.duration_s, 3) if command else 0,
        "exit_code": command.exit_code if command else None,
        "message": run.detail,
    }


def _output(run: EnvRun) -> str:
    command = run.command
    return (command.stdout_tail + command.stderr_tail) if command else run.detail


def diff_commands(
    baseline: EnvRun, candidate: EnvRun, thresholds: Thresholds
) -> tuple[BehaviourChange | None, bool]:
    """The change of a plain command (key ``command``), and whether its timing is suspect."""
    paths = baseline.volatile_paths + candidate.volatile_paths
    outcome = {"passed": "passed", "failed": "failed"}.get
    verdict = transition(outcome(baseline.status, "error"), outcome(candidate.status, "error"))
    base, cand = _command_side(baseline), _command_side(candidate)
    change = None
    if verdict is not None:
        change = BehaviourChange(
            COMMAND_KEY,
            verdict,
            f"{baseline.status} -> {candidate.status}: {candidate.detail}",
            base,
            cand,
            first_differing_lines=first_differing_lines(
                _output(baseline), _output(candidate), paths
            ),
        )
    found = new_warnings(baseline.warnings, candidate.warnings, thresholds.warning_kinds)
    if found:
        warning = _warning_change(COMMAND_KEY, found, base, cand)
        change = change.with_verdict("new-warning", warning.detail) if change else warning
        change = dataclasses.replace(change, new_warnings=warning.new_warnings)
    suspect = (
        baseline.status == candidate.status == "passed"
        and baseline.command is not None
        and candidate.command is not None
        and is_timing_suspect(baseline.command.duration_s, candidate.command.duration_s, thresholds)
    )
    return change, suspect


def suite_end_change(baseline: EnvRun, candidate: EnvRun) -> BehaviourChange | None:
    """For pytest runs: the candidate's whole run ended abnormally, the baseline's did not."""
    if candidate.ended_normally or not baseline.ended_normally:
        return None
    return BehaviourChange(
        COMMAND_KEY,
        "newly-erroring",
        f"the candidate's test run {candidate.detail}",
        _command_side(baseline),
        _command_side(candidate),
        first_differing_lines=first_differing_lines(
            _output(baseline),
            _output(candidate),
            baseline.volatile_paths + candidate.volatile_paths,
        ),
    )


def numeric_change(comparison: NumericComparison) -> BehaviourChange | None:
    if not comparison.drift:
        return None
    return BehaviourChange(
        f"numerics:{comparison.name}",
        "numeric-drift",
        comparison.reason,
        {},
        {},
        numerics=comparison.to_json(),
    )
