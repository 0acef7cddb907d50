"""The calls section's stored results: two kinds of typed, versioned rows.

- :class:`CallsSummary` (key ``__summary__``, env_role ``both``): whether the calls were
  recorded and replayed (:class:`SummaryStatus`), with the counts the report shows:
  recorded, replayed, not replayable (and why), per verdict, compared by value, compared
  by metadata only (and why), what was not followed while recording (forked processes);
- :class:`CallChange` (key ``<file>:<line> <callable>#<id>``, env_role ``both``): one
  recorded call that behaves differently, or could not be replayed
  (``compare.CallVerdict``); calls judged ``same`` are counted, not stored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from torchcanary.calls.compare import CallVerdict
from torchcanary.results import payload_version, record_arguments, record_row
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult

SCHEMA_VERSION = 1


class SummaryStatus(str, enum.Enum):
    """How the recording and the replays went."""

    CHANGES = "changes"
    NO_CHANGES = "no-changes"
    NOT_CHECKED = "not-checked"  # nothing recorded or replayed; ``reason`` says why
    INCOMPLETE = "incomplete"  # replays broke off or were not faithful: ``reason`` says which

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CallsSummary:
    """``counts`` maps each ``CallVerdict`` to how many distinct calls got it."""

    verdict: SummaryStatus
    command: str = ""
    reason: str | None = None
    recording_run: str = ""  # how the user's command ended while recording (it may fail)
    recorded: int = 0
    replayed: int = 0
    not_replayable: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    compared_by_value: int = 0  # calls whose every output and changed argument was compared
    metadata_only: dict[str, int] = field(default_factory=dict)  # why -> calls
    # what ran while recorded but was not followed: "forked process(es)" -> how many
    not_followed: dict[str, int] = field(default_factory=dict)
    # calls past their group's sample (site x callable x argument class x modes): counted,
    # represented by the sample, not replayed themselves
    not_sampled: int = 0
    not_sampled_by: dict[str, int] = field(default_factory=dict)  # callable -> of those calls
    # public calls counted while the recorder rested (worker/replay/record.py's QUIET): one
    # that a glance could not tell from the calls before it is not recorded
    not_examined: int = 0
    key: str = SUMMARY_KEY
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def compared_share(self) -> float | None:
        """The share of the recorded calls compared by value (None: nothing recorded)."""
        return self.compared_by_value / self.recorded if self.recorded else None

    def to_json(self) -> dict[str, Any]:
        return record_row(self)


@dataclass(frozen=True)
class CallChange:
    """One call, where the user's code made it, and what changed (``detail``).

    ``announced`` holds the diff section's matching change and the release notes' words,
    where this run's diff found them (empty otherwise).
    """

    key: str
    verdict: CallVerdict
    site: str = ""
    callable: str = ""
    level: str = "api"
    signature: str = ""
    count: int = 1
    detail: str = ""
    new_warnings: tuple[str, ...] = ()
    gone_warnings: tuple[str, ...] = ()
    max_rel_err: float | None = None
    announced: dict[str, str] = field(default_factory=dict)
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def sentence(self) -> str:
        """``src/io/ckpt.py:42 torch.load(...): returns in the baseline, raises ...``."""
        return f"{self.site} {self.callable}({self.signature}): {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return record_row(self)


CallsRecord = CallsSummary | CallChange


def from_json(data: dict[str, Any]) -> CallsRecord:
    """One stored calls row ``{key, env_role, verdict, payload}`` as its record."""
    payload = data.get("payload") or {}
    payload_version(payload, SCHEMA_VERSION)
    key = str(data["key"])
    if key == SUMMARY_KEY:
        summary_args = record_arguments(CallsSummary, payload)
        return CallsSummary(verdict=SummaryStatus(data["verdict"]), **summary_args)
    change_args = record_arguments(CallChange, payload)
    return CallChange(key=key, verdict=CallVerdict(data["verdict"]), **change_args)


def from_rows(rows: list[SectionResult]) -> list[CallsRecord]:
    """The calls section's stored rows as records, in their order."""
    return [from_json(row.to_json()) for row in rows]
