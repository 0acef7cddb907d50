"""The diff section's stored results: a summary row and one row per change, typed.

- :class:`DiffSummary` (key ``__summary__``): whether the two builds' surfaces were
  compared (:class:`ComparisonStatus`), with counts per kind, the scan of the user's code and
  how long it took; a diff that was not compared carries only ``reason``.
- :class:`DiffChange` (key ``<kind>:<symbol>``): one changed name; its verdict is its
  kind (``changes.ChangeKind``), ``in_use`` how the user's code meets it (one of
  ``assess.IN_USE_*``, empty when it does not).

Both are stored with ``env_role="both"``; :func:`from_json` reads them back, the
unversioned payloads of older runs included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchcanary.diff.changes import ChangeKind
from torchcanary.results import ComparisonStatus, payload_version, record_arguments, record_row
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class DiffSummary:
    """The comparison as a whole; every figure is None when it was not compared."""

    verdict: ComparisonStatus
    reason: str | None = None
    counts: dict[str, int] | None = None
    unannounced_counts: dict[str, int] | None = None
    unannounced_altering: int | None = None
    announced: int | None = None
    total: int | None = None
    in_use: dict[str, int] | None = None
    hits: int | None = None
    scan: dict[str, Any] | None = None
    torch_versions: dict[str, Any] | None = None
    timings_s: dict[str, Any] | None = None
    import_failures: dict[str, Any] | None = None
    skipped_namespaces: dict[str, Any] | None = None
    section_s: float | None = None
    reused_made_at: dict[str, float] | None = None  # surfaces kept from earlier runs: when made
    normalisation: str | None = None
    not_checked: tuple[str, ...] | None = None
    key: str = SUMMARY_KEY
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        optional = frozenset(name for name in self.__dataclass_fields__ if name != "verdict")
        return record_row(self, optional)


@dataclass(frozen=True)
class DiffChange:
    """One name whose presence, default or signature differs between the builds."""

    key: str
    verdict: ChangeKind
    kind: str = ""
    symbol: str = ""
    baseline: Any = None
    candidate: Any = None
    detail: str = ""
    alters_results: bool = False
    announced: bool = False
    mentions: tuple[str, ...] = ()
    hits: tuple[dict[str, Any], ...] = ()
    in_use: str | None = None
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """What the user's code would write; the row's key when the payload lacks it."""
        return self.symbol or self.key

    @property
    def unannounced_altering(self) -> bool:
        """It can change what existing code computes, and the release text does not say."""
        return self.alters_results and not self.announced

    def to_json(self) -> dict[str, Any]:
        return record_row(self)


DiffRecord = DiffSummary | DiffChange


def from_json(data: dict[str, Any]) -> DiffRecord:
    """One stored diff row ``{key, env_role, verdict, payload}`` as its record."""
    payload = data.get("payload") or {}
    payload_version(payload, SCHEMA_VERSION)
    key, role = str(data["key"]), str(data.get("env_role", BOTH))
    if key == SUMMARY_KEY:
        return DiffSummary(
            verdict=ComparisonStatus(data["verdict"]),
            env_role=role,
            **record_arguments(DiffSummary, payload),
        )
    return DiffChange(
        key=key,
        verdict=ChangeKind(data["verdict"]),
        env_role=role,
        **record_arguments(DiffChange, payload),
    )


def from_rows(rows: list[SectionResult]) -> list[DiffRecord]:
    """The diff section's stored rows as records, in their order."""
    return [from_json(row.to_json()) for row in rows]
