"""One item's results (a claim, benchmark, drill, ...) across the runs of a store, in one query.

A run is described by its environments' torch versions (from the manifests the run
recorded) and its specs; filters match either, so ``--candidate 2.14`` finds every run
whose candidate was a 2.14 release.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import SectionRecord
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SectionResult

# Reads one stored row {key, env_role, verdict, payload} as its section's record.
RecordReader = Callable[[dict[str, Any]], SectionRecord]
# One run's verdict for the item from its verdicts per environment role.
VerdictOf = Callable[[dict[str, str]], str]


@dataclass(frozen=True)
class HistoryFilter:
    """Which runs count: each field narrows; ``None`` leaves it open."""

    baseline: str | None = None
    candidate: str | None = None
    since: float | None = None  # epoch seconds, inclusive
    until: float | None = None  # epoch seconds, exclusive
    limit: int | None = None  # the most recent N runs
    # One fleet hardware profile's results only ('' is runs made on one machine); None: all.
    profile: str | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One run's result for the item: its verdict(s), and for a benchmark the ratio."""

    run_id: str
    created_at: float
    baseline: str
    candidate: str
    verdict: str
    verdicts: dict[str, str] = field(default_factory=dict)  # per environment role
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    profile: str = ""  # the fleet hardware profile it ran on ('' on one machine)

    @property
    def label(self) -> str:
        """When the run was made and what it compared, as a plot row's label."""
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(self.created_at))
        on = f" on {self.profile}" if self.profile else ""
        return f"{when} {self.candidate} vs {self.baseline}{on}"


_RUNS_JOIN = """
    JOIN runs r ON r.run_id = x.run_id
    LEFT JOIN environments b
        ON b.run_id = r.run_id AND b.profile = x.profile AND b.role = 'baseline'
    LEFT JOIN environments c
        ON c.run_id = r.run_id AND c.profile = x.profile AND c.role = 'candidate'
"""


def _where(run_filter: HistoryFilter) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for role, wanted in (("b", run_filter.baseline), ("c", run_filter.candidate)):
        if wanted:
            clauses.append(f"({role}.torch_version LIKE ? OR {role}.spec LIKE ?)")
            params += [f"%{wanted}%", f"%{wanted}%"]
    if run_filter.since is not None:
        clauses.append("r.created_at >= ?")
        params.append(run_filter.since)
    if run_filter.until is not None:
        clauses.append("r.created_at < ?")
        params.append(run_filter.until)
    if run_filter.profile is not None:
        clauses.append("x.profile = ?")
        params.append(run_filter.profile)
    return "".join(f" AND {clause}" for clause in clauses), params


def has_rows(store: ResultStore, section: str, item: str) -> bool:
    """Whether any run of ``store`` has a ``section_results`` row of ``section`` for ``item``."""
    found = store.query(
        "SELECT 1 FROM section_results WHERE section = ? AND key = ? LIMIT 1", (section, item)
    )
    return bool(found)


def history(
    store: ResultStore,
    item: str,
    section: str,
    run_filter: HistoryFilter,
    read: RecordReader | None = None,
) -> list[HistoryEntry]:
    """``item``'s rows of ``section`` in ``section_results`` across the runs that pass
    ``run_filter``, oldest first.

    ``read`` is the section's ``record_from_json``: a record with an interval (``ratio``,
    ``ci_low``, ``ci_high``, as a benchmark's) gives the entry its ratio.
    """
    return query_history(
        store,
        item,
        run_filter,
        "x.payload_json FROM section_results x",
        ("x.section = ? AND x.key = ?", [section, item]),
        read,
    )


def query_history(
    store: ResultStore,
    item: str,
    run_filter: HistoryFilter,
    payload_from: str,
    match: tuple[str, list[Any]],
    read: RecordReader | None = None,
    verdict_of: VerdictOf | None = None,
) -> list[HistoryEntry]:
    """The history of ``item`` in any table keyed by run and profile, oldest first.

    ``payload_from`` is the payload column and the table as ``x`` (``NULL FROM t x`` where
    there is no payload); ``match`` the condition on ``x`` naming the item, with its
    arguments; ``verdict_of`` makes one run's verdicts one (default: the ``both`` verdict,
    else each role's).
    """
    where, params = _where(run_filter)
    condition, match_args = match
    sql = (
        "SELECT r.run_id, x.profile, r.created_at, b.torch_version, c.torch_version, "
        f"x.env_role, x.verdict, {payload_from}" + _RUNS_JOIN + f"WHERE {condition}" + where
    )
    rows = store.query(sql + " ORDER BY r.created_at, r.run_id, x.profile", [*match_args, *params])
    entries = _entries(rows, item, read or SectionResult.from_json, verdict_of or _joined_verdict)
    if run_filter.limit is not None:
        entries = entries[-run_filter.limit :]
    return entries


def _entries(
    rows: list[tuple[Any, ...]], item: str, read: RecordReader, verdict_of: VerdictOf
) -> list[HistoryEntry]:
    # A fleet run has one entry per profile: each profile's verdicts stand on their own.
    by_run: dict[tuple[str, str], dict[str, Any]] = {}
    for run_id, profile, created, base, cand, role, verdict, payload in rows:
        run = by_run.setdefault(
            (run_id, profile),
            {
                "created": created,
                "baseline": base or "?",
                "candidate": cand or "?",
                "verdicts": {},
                "record": None,
            },
        )
        run["verdicts"][role] = verdict
        if payload is not None and role == "both":
            row = {"key": item, "env_role": role, "verdict": verdict}
            run["record"] = read({**row, "payload": json.loads(payload)})
    return [_entry(run_id, profile, run, verdict_of) for (run_id, profile), run in by_run.items()]


def _entry(run_id: str, profile: str, run: dict[str, Any], verdict_of: VerdictOf) -> HistoryEntry:
    verdicts: dict[str, str] = run["verdicts"]
    record = run["record"]
    return HistoryEntry(
        run_id,
        float(run["created"]),
        run["baseline"],
        run["candidate"],
        verdict_of(verdicts),
        dict(verdicts),
        *_interval(record),
        profile,
    )


def _joined_verdict(verdicts: dict[str, str]) -> str:
    if set(verdicts) == {"both"}:  # one verdict across the environments (a benchmark)
        return verdicts["both"]
    return ", ".join(f"{role}: {v}" for role, v in sorted(verdicts.items()))


def _interval(record: SectionRecord | None) -> tuple[float | None, float | None, float | None]:
    """A record's ratio and interval, when it is a record that has them."""
    figures = tuple(getattr(record, name, None) for name in ("ratio", "ci_low", "ci_high"))
    if not all(value is None or isinstance(value, float | int) for value in figures):
        return None, None, None  # a plain row's payload, or a field of another meaning
    return figures  # type: ignore[return-value]
