"""The stack section's stored results: three kinds of typed, versioned rows.

- :class:`StackRun` (key ``__summary__``, env_role ``baseline``/``candidate``): how one
  environment's run of the user's command ended (:class:`RunStatus`), with its counts;
- :class:`StackSummary` (key ``__summary__``, env_role ``both``): whether the runs were
  compared (:class:`ComparisonStatus`), with counts per change verdict;
- :class:`StackChange` (a test id, ``command`` or ``numerics:<name>``, env_role ``both``):
  one key that behaves differently (:class:`ChangeVerdict`).

:func:`from_json` reads each back, the unversioned payloads of older runs included.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import ComparisonStatus, payload_version, record_arguments, record_row
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult

SCHEMA_VERSION = 1


class ChangeVerdict(str, enum.Enum):
    """What changed for one key, most serious first (one key gets the most serious one)."""

    NEWLY_ERRORING = "newly-erroring"
    NEWLY_FAILING = "newly-failing"
    NEWLY_SKIPPED = "newly-skipped"
    NEWLY_PASSING = "newly-passing"
    NUMERIC_DRIFT = "numeric-drift"
    NEW_WARNING = "new-warning"
    SLOWER = "slower"
    FASTER = "faster"
    UNCHANGED = "unchanged"

    def __str__(self) -> str:
        return self.value

    @property
    def is_new_break(self) -> bool:
        return self in (ChangeVerdict.NEWLY_FAILING, ChangeVerdict.NEWLY_ERRORING)


class RunStatus(str, enum.Enum):
    """How one environment's run of the command ended."""

    PASSED = "passed"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    NOT_FOUND = "not-found"
    INSTALL_FAILED = "install-failed"
    PYTEST_ERROR = "pytest-error"
    NO_TESTS = "no-tests"

    def __str__(self) -> str:
        return self.value

    @property
    def ran(self) -> bool:
        """The command started (it may have failed): there is something to compare."""
        return self not in (RunStatus.INSTALL_FAILED, RunStatus.NOT_FOUND)


@dataclass(frozen=True)
class StackRun:
    """One environment's run: how it ended, test outcome counts, output tails."""

    env_role: str
    verdict: RunStatus
    torch_version: str = "?"
    status: str = ""
    detail: str = ""
    install: dict[str, Any] = field(default_factory=dict)
    pytest: bool = False
    tests: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    exit_code: int | None = None
    duration_s: float = 0.0
    output_bytes: int = 0
    log_truncated: bool = False
    log_path: str = ""
    stragglers: tuple[str, ...] = ()
    stdout_tail: str = ""
    stderr_tail: str = ""
    key: str = SUMMARY_KEY
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return record_row(self)


@dataclass(frozen=True)
class StackSummary:
    """The comparison of the two runs; ``reason`` says why they could not be compared.

    ``counts`` maps each change verdict (and ``unchanged``) to how many keys got it; the
    ``only_in_*`` lists name at most 50 tests seen in one run only, ``*_count`` all of them.
    """

    verdict: ComparisonStatus
    command: str = ""
    pytest: bool = False
    reruns: int = 0
    reason: str | None = None
    only_in_baseline: tuple[str, ...] | None = None
    only_in_baseline_count: int | None = None
    only_in_candidate: tuple[str, ...] | None = None
    only_in_candidate_count: int | None = None
    # Tests that ran in the baseline and not in the candidate (``lost_passed``: of them,
    # those that passed there); at most 50 named, the counts in all.
    lost: tuple[str, ...] | None = None
    lost_count: int | None = None
    lost_passed: tuple[str, ...] | None = None
    lost_passed_count: int | None = None
    counts: dict[str, int] | None = None
    rerun_keys: tuple[str, ...] | None = None
    deterministic_breaks: int | None = None
    flaky: int | None = None
    numerics: dict[str, Any] | None = None
    key: str = SUMMARY_KEY
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    # Written only when they apply (not compared; not pytest), as before the records.
    _OPTIONAL = frozenset(
        {
            "reason",
            "only_in_baseline",
            "only_in_baseline_count",
            "only_in_candidate",
            "only_in_candidate_count",
            "lost",
            "lost_count",
            "lost_passed",
            "lost_passed_count",
            "counts",
            "rerun_keys",
            "deterministic_breaks",
            "flaky",
            "numerics",
        }
    )

    def only_in(self, role: str) -> tuple[tuple[str, ...], int]:
        """The tests (listed, and how many in all) seen only in ``role``'s run."""
        listed = self.only_in_baseline if role == "baseline" else self.only_in_candidate
        count = self.only_in_baseline_count if role == "baseline" else self.only_in_candidate_count
        return tuple(listed or ()), int(count or 0)

    def to_json(self) -> dict[str, Any]:
        return record_row(self, self._OPTIONAL)


@dataclass(frozen=True)
class StackChange:
    """One key that behaves differently; ``deterministic`` is None when it was not re-run.

    ``baseline``/``candidate`` hold each side's ``{outcome, duration_s, message}``, and
    a test's sides its ``traceback`` (the failure's text, bounded; empty where it passed);
    ``reruns`` the outcomes of the re-runs per role, ``durations`` their seconds.
    """

    key: str
    verdict: ChangeVerdict
    detail: str = ""
    baseline: dict[str, Any] = field(default_factory=dict)
    candidate: dict[str, Any] = field(default_factory=dict)
    also: tuple[str, ...] = ()
    new_warnings: tuple[dict[str, str], ...] = ()
    first_differing_lines: dict[str, Any] = field(default_factory=dict)
    deterministic: bool | None = None
    reruns: dict[str, list[str]] = field(default_factory=dict)
    durations: dict[str, list[float]] = field(default_factory=dict)
    numerics: dict[str, Any] | None = None
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks_as_new_break(self) -> bool:
        """A new failure or error that re-runs did not show to be flaky."""
        return self.verdict.is_new_break and self.deterministic is not False

    @property
    def findings(self) -> tuple[str, ...]:
        """Its verdict and the lesser ones it also got."""
        return (self.verdict.value, *self.also)

    def to_json(self) -> dict[str, Any]:
        return record_row(self)


StackRecord = StackRun | StackSummary | StackChange


def from_json(data: dict[str, Any]) -> StackRecord:
    """One stored stack row ``{key, env_role, verdict, payload}`` as its record."""
    payload = data.get("payload") or {}
    payload_version(payload, SCHEMA_VERSION)
    key, role = str(data["key"]), str(data["env_role"])
    if key == SUMMARY_KEY and role == BOTH:
        return StackSummary(
            verdict=ComparisonStatus(data["verdict"]),
            **record_arguments(StackSummary, payload),
        )
    if key == SUMMARY_KEY:
        return StackRun(
            env_role=role,
            verdict=RunStatus(data["verdict"]),
            **record_arguments(StackRun, payload),
        )
    return StackChange(
        key=key,
        verdict=ChangeVerdict(data["verdict"]),
        env_role=role,
        **record_arguments(StackChange, payload),
    )


def from_rows(rows: list[SectionResult]) -> list[StackRecord]:
    """The stack section's stored rows as records, in their order."""
    return [from_json(row.to_json()) for row in rows]
