"""The bench section's stored results: one typed, versioned record per benchmark.

A benchmark that was measured on every side and judged is a :class:`BenchMeasured`; one
that skipped or failed on a side is a :class:`BenchSkipped` (verdict ``skipped``). Both
are stored with ``env_role="both"`` and read back by :func:`from_json`, which also reads
the unversioned payloads of runs stored before the records existed (schema 1 is that
same form, with ``schema`` added).

The figures of the judged comparison (ratio, interval at ``confidence``, p- and q-value,
MDE) are fields; what only the report's detail shows (each side's summary, the full
comparison, roofline, dispatch) stays as the nested JSON the harness produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from torchcanary.results import payload_version, record_arguments, record_row
from torchcanary.store.rows import BOTH, SectionResult

SCHEMA_VERSION = 1


class BenchVerdict(str, Enum):
    """What a benchmark's comparison showed; the one vocabulary of the bench section."""

    FASTER = "faster"  # significant after BH, beyond the floor
    SLOWER = "slower"
    SAME = "same"  # shown equivalent: the interval fits a band smaller than what matters
    NO_CHANGE_DETECTED = "no-change-detected"  # not significant, not shown equivalent
    TOO_NOISY = "too-noisy"  # untestable, unbounded interval, or the A/A control alarmed
    SKIPPED = "skipped"  # not measured on a side that lacks its device or feature: honest
    NOT_RUN = "not-run"  # crashed, hung or raised on a side: it says nothing of the change

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BenchMeasured:
    """A benchmark measured on every side and judged; ``ratio`` is candidate / baseline time.

    ``ratio``, ``ci_low`` and ``ci_high`` are None when the comparison was untestable
    (verdict ``too-noisy``, the reason in ``reasons``); ``q_value`` is None then too.
    ``aa`` marks an A/A run (the baseline against itself).
    """

    key: str
    verdict: BenchVerdict
    kind: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    aa: bool = False
    sides: dict[str, Any] = field(default_factory=dict)
    comparison: dict[str, Any] = field(default_factory=dict)
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = 0.95
    equivalence: float = 0.05
    clock: str = "wall"
    p_value: float | None = None
    q_value: float | None = None
    mde: float | None = None
    mde_alpha: float | None = None
    aa_control: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()
    calibration: float = 1.0
    noise_warnings: tuple[str, ...] = ()
    roofline: dict[str, Any] = field(default_factory=dict)
    machine_roofline: dict[str, Any] = field(default_factory=dict)
    confounds: dict[str, Any] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    collective_bandwidth: dict[str, Any] | None = None
    dispatch: dict[str, Any] | None = None
    dispatch_diff: dict[str, Any] | None = None
    oneshot: dict[str, Any] | None = None
    workload: dict[str, Any] | None = None  # a user's workload: its facts per side
    numerics: dict[str, Any] | None = None  # a user's workload: its outputs compared
    settled: dict[str, Any] | None = None  # stopped early by a sequential look: groups, why
    nodes: int | None = None  # collectives with one rank on each of this many fleet nodes
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    _OPTIONAL = frozenset(
        {
            "collective_bandwidth",
            "dispatch",
            "dispatch_diff",
            "oneshot",
            "workload",
            "numerics",
            "settled",
            "nodes",
        }
    )

    @property
    def slowdown(self) -> float | None:
        """How much slower the judged side is, as a fraction (None when untestable)."""
        return None if self.ratio is None else self.ratio - 1

    @property
    def changed_dispatch(self) -> bool:
        return bool((self.dispatch_diff or {}).get("changed"))

    @property
    def numerics_drift(self) -> bool:
        """A user's workload whose outputs differ between the versions beyond tolerance."""
        return bool((self.numerics or {}).get("drift"))

    @property
    def payload(self) -> dict[str, Any]:
        """The stored JSON payload, for code that reads it as a whole (workload facts)."""
        payload: dict[str, Any] = self.to_json()["payload"]
        return payload

    def to_json(self) -> dict[str, Any]:
        return record_row(self, self._OPTIONAL)


@dataclass(frozen=True)
class BenchSkipped:
    """A benchmark that did not run (or crashed, hung or raised) on at least one side.

    ``skipped`` and ``failed`` map the store role (``baseline``, ``candidate``,
    ``baseline-aa``) to the reason, or to ``{status, error}`` for a failure.
    """

    key: str
    verdict: BenchVerdict = BenchVerdict.SKIPPED
    kind: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    aa: bool = False
    reason: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    nodes: int | None = None  # as BenchMeasured.nodes
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return record_row(self, frozenset({"nodes"}))


BenchResult = BenchMeasured | BenchSkipped
UNMEASURED = (BenchVerdict.SKIPPED, BenchVerdict.NOT_RUN)  # what a BenchSkipped may say


def unmeasured_verdict(failed: dict[str, Any]) -> BenchVerdict:
    """A benchmark left unmeasured: not run where a side failed it, else an honest skip."""
    return BenchVerdict.NOT_RUN if failed else BenchVerdict.SKIPPED


def from_json(data: dict[str, Any]) -> BenchResult:
    """One stored bench result ``{key, env_role, verdict, payload}`` as its record."""
    payload = data.get("payload") or {}
    payload_version(payload, SCHEMA_VERSION)
    verdict = BenchVerdict(data["verdict"])
    kind: type[BenchMeasured] | type[BenchSkipped] = (
        BenchSkipped if verdict in UNMEASURED else BenchMeasured
    )
    return kind(
        key=str(data["key"]),
        verdict=verdict,
        env_role=str(data.get("env_role", BOTH)),
        **record_arguments(kind, payload),
    )


def bench_record(bench_id: str, verdict: BenchVerdict, payload: dict[str, Any]) -> BenchResult:
    """A benchmark's payload (``bench/payload.py``) as the record the section stores."""
    return from_json({"key": bench_id, "env_role": "both", "verdict": verdict, "payload": payload})


def from_rows(rows: list[SectionResult]) -> list[BenchResult]:
    """The bench section's stored rows (``SectionResult``) as records, in their order."""
    return [from_json(row.to_json()) for row in rows]
