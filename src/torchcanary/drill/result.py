"""The drill section's stored results, typed: one row per drill and environment, and the
fault-free runs the drills were compared against.

- :class:`DrillRun` (key ``<fault>:<recovery>``, ``env_role`` baseline or candidate): how
  one drill ended (:class:`DrillVerdict`), why, and what was
  measured: the injected fault and the recovery figures (``judging.fault_facts``), the
  final and per-step results against the fault-free run, the Flight Recorder's finding
  and the timeline. A drill of the user's own job (``drill/user_job.py``) fills the
  ``job*`` fields. A repeated drill (``drill/repeats.py``) keeps each trial in ``trials``
  and the figures of one of them.
- :class:`DrillReference` (key ``reference:<mode>``): one fault-free run; its verdict is
  ``passed`` when it finished right, ``failed`` otherwise.

A drill that did not run far (not checkable here, absent, a harness error) carries only
``reason`` and ``spec``, so every payload field is optional: it is written only when the
drill wrote it. A field the row stored as ``null`` is kept as ``null``, and keys this
version does not know stay in ``extra``, and the payload's keys keep their stored order,
so a row read and written again is the row that was stored, to the byte. :func:`from_json`
reads the unversioned payloads of older runs as version 1; version 2 added ``trials``, and
a row without it reads as one trial.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from torchcanary.results import payload_fields, payload_version, record_arguments, record_row
from torchcanary.store.rows import SectionResult

# 2: ``trials``, each trial of a repeated drill. Version 1 rows read as one trial each.
SCHEMA_VERSION = 2
REFERENCE_PREFIX = "reference:"


class DrillVerdict(str, enum.Enum):
    """One drill in one environment; stored by value (``"not-checkable"``, ...). What each
    means: ``drill/drill.py``."""

    PASSED = "passed"
    FAILED = "failed"
    ABSENT = "absent"
    NOT_CHECKABLE = "not-checkable"
    ERROR = "error"
    FLAKY = "flaky"  # repeated: passed in some trials, not in others (drill/repeats.py)

    def __str__(self) -> str:  # in text (reasons, tables) a verdict reads as its stored word
        return self.value


@dataclass(frozen=True)
class DrillRun:
    """One drill in one environment: its verdict, the reason, and the figures measured."""

    key: str
    env_role: str
    verdict: DrillVerdict
    reason: str | None = None
    spec: dict[str, Any] | None = None
    traceback: str | None = None  # a harness that raised
    parallel: str | None = None  # the data-parallel mode that ran, as the job said
    # a drill of the user's own job
    job: str | None = None
    comparison: str | None = None
    job_rtol: float | None = None
    step_source: str | None = None
    fault_at: str | None = None
    job_errors_before_fault: tuple[str, ...] | None = None
    job_step_diffs: tuple[dict[str, Any], ...] | None = None
    final_step: int | None = None
    last_reported_loss: float | None = None
    # what happened in the job
    restored: str | None = None
    old_wrapper_freed: bool | None = None
    injected: str | None = None
    struck_rank: int | None = None
    detect_s: float | None = None
    resume_s: float | None = None
    last_step_before_fault: int | None = None
    resume_step: int | None = None
    steps_lost: int | None = None
    throughput_before: float | None = None
    throughput_after: float | None = None
    final_loss: float | None = None
    final_losses: tuple[float, ...] | None = None
    finished_ranks: int | None = None
    final_world: int | None = None
    params_identical: bool | None = None
    restarts: int | None = None
    first_error: str | None = None
    error_kinds: tuple[str, ...] | None = None
    unsupported: str | None = None
    in_place: dict[str, Any] | None = None  # a user's job recovering in place: what it said
    exit_codes: dict[str, int | None] | None = None
    bounded_out: bool | None = None
    killed_at_cleanup: int | None = None
    flight_recorder: dict[str, Any] | None = None
    timeline: dict[str, Any] | None = None
    # against the fault-free run
    reference: dict[str, Any] | None = None
    reference_loss: float | None = None
    step_diffs: tuple[dict[str, Any], ...] | None = None
    step_check: dict[str, Any] | None = None
    # a drill across the fleet's nodes (``drill --fleet --nodes N``)
    nodes: tuple[Any, ...] | None = None  # where each rank ran
    ray_noticed_s: float | None = None  # a node kill: how long until Ray counted it dead
    slurm_noticed_s: float | None = None  # the same on Slurm (SlurmdTimeout bounds it)
    notice_waited: str | None = None  # how long either was waited for, and why
    # the drill as a whole
    trials: tuple[dict[str, Any], ...] | None = None  # each trial (drill/repeats.py)
    duration_s: float | None = None
    orphans_after_cleanup: tuple[int, ...] | None = None
    namespaces_after_cleanup: tuple[str, ...] | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    stored_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.verdict is DrillVerdict.PASSED

    @property
    def trial_count(self) -> int:
        """How many trials made this row (one, for a row stored before trials were kept)."""
        return len(self.trials) if self.trials else 1

    @property
    def trials_passed(self) -> int:
        """How many of its trials passed."""
        if not self.trials:
            return int(self.passed)
        return sum(trial.get("verdict") == DrillVerdict.PASSED.value for trial in self.trials)

    @property
    def reason_text(self) -> str:
        """The reason as text, as reports have always shown it: '' when the drill gave none,
        'None' when it stored a null one."""
        if self.reason is not None:
            return self.reason
        return "None" if "reason" in self.extra else ""

    @property
    def named_culprit(self) -> bool | None:
        """Whether the Flight Recorder named the rank at fault (None: no rank was at fault)."""
        named: bool | None = (self.flight_recorder or {}).get("named_culprit")
        return named

    def to_json(self) -> dict[str, Any]:
        return record_row(self, payload_fields(type(self)))


@dataclass(frozen=True)
class DrillReference:
    """A fault-free run of the job in one environment (``ok``: it finished right)."""

    key: str
    env_role: str
    verdict: DrillVerdict
    ok: bool | None = None
    reason: str | None = None
    parallel: str | None = None
    job: str | None = None
    comparison: str | None = None
    duration_s: float | None = None
    run_s: float | None = None
    exit_code: int | None = None
    exit_codes: tuple[int | None, ...] | None = None
    final_step: int | None = None
    final_loss: float | None = None
    first_step_loss: float | None = None
    digests: tuple[str, ...] | None = None
    steps: tuple[Any, ...] | None = None
    step_source: str | None = None
    params_identical: bool | None = None
    throughput: float | None = None
    cached: dict[str, Any] | None = None  # reused from the on-disk cache: when it was made
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    stored_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return record_row(self, payload_fields(type(self)))


DrillRecord = DrillRun | DrillReference


def is_reference(key: str) -> bool:
    """Whether a drill row's key names a fault-free reference run rather than a drill."""
    return key.startswith(REFERENCE_PREFIX)


def from_json(data: dict[str, Any]) -> DrillRecord:
    """One stored drill row ``{key, env_role, verdict, payload}`` as its record."""
    payload = data.get("payload") or {}
    version = payload_version(payload, SCHEMA_VERSION)
    key = str(data["key"])
    kind: type[DrillRun] | type[DrillReference] = DrillReference if is_reference(key) else DrillRun
    arguments = record_arguments(kind, payload)
    # A field stored as null stays in the payload as null (the field reads None either way).
    for name in payload_fields(kind):
        if name in payload and payload[name] is None:
            arguments["extra"][name] = arguments.pop(name)
    return kind(
        key=key,
        env_role=str(data["env_role"]),
        verdict=DrillVerdict(data["verdict"]),
        schema_version=version,  # an older row is written again as it was stored
        **arguments,
    )


def drill_record(
    key: str, env_role: str, verdict: DrillVerdict, payload: dict[str, Any]
) -> DrillRecord:
    """The record of what a drill runner measured (its payload), as the section stores it."""
    record = from_json({"key": key, "env_role": env_role, "verdict": verdict, "payload": payload})
    return replace(record, schema_version=SCHEMA_VERSION)


def from_rows(rows: list[SectionResult]) -> list[DrillRecord]:
    """The drill section's stored rows as records, in their order."""
    return [from_json(row.to_json()) for row in rows]
