"""One item's results (a claim, benchmark, drill, ...) across the runs of a store, in one query.

A run is described by its environments' torch versions (from the manifests the run
recorded) and its specs; filters match either, so ``--candidate 2.14`` finds every run
whose candidate was a 2.14 release.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torchcanary.errors import CanaryError
from torchcanary.results import SectionRecord, Verdict, compare_claim
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import RunRow, SectionResult

PROBE_RESULTS = "claims"  # the section whose results are probe results, in their own table
# Reads one stored row {key, env_role, verdict, payload} as its section's record.
RecordReader = Callable[[dict[str, Any]], SectionRecord]


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


def find_section(store: ResultStore, item: str, sections: Iterable[str]) -> str:
    """The one of ``sections`` (the registered ones) that has results for ``item``.

    Several or none is a usage error.
    """
    wanted = list(sections)
    found = []
    if PROBE_RESULTS in wanted and store.query(
        "SELECT 1 FROM probe_results WHERE probe_id = ? LIMIT 1", (item,)
    ):
        found.append(PROBE_RESULTS)
    stored = {
        str(row[0])
        for row in store.query(
            "SELECT DISTINCT section FROM section_results WHERE key = ?", (item,)
        )
    }
    found += [section for section in wanted if section in stored]
    if not found:
        raise CanaryError(
            f"no result {item!r} in any section ({', '.join(wanted)}) of {store.location}; "
            "`torchcanary report RUN` shows a run's ids"
        )
    if len(found) > 1:
        raise CanaryError(f"{item!r} is in {' and '.join(found)}; pick one with --section")
    return found[0]


def history(
    store: ResultStore,
    item: str,
    section: str,
    run_filter: HistoryFilter,
    read: RecordReader | None = None,
) -> list[HistoryEntry]:
    """``item``'s results in ``section`` across the runs that pass ``run_filter``, oldest first.

    ``read`` is the section's ``record_from_json``: a record with an interval (``ratio``,
    ``ci_low``, ``ci_high``, as a benchmark's) gives the entry its ratio.
    """
    where, params = _where(run_filter)
    if section == PROBE_RESULTS:
        sql = (
            "SELECT r.run_id, x.profile, r.created_at, b.torch_version, c.torch_version, "
            "x.env_role, x.verdict, NULL FROM probe_results x"
            + _RUNS_JOIN
            + "WHERE x.probe_id = ?"
            + where
        )
        args: list[Any] = [item, *params]
    else:
        sql = (
            "SELECT r.run_id, x.profile, r.created_at, b.torch_version, c.torch_version, "
            "x.env_role, x.verdict, x.payload_json FROM section_results x"
            + _RUNS_JOIN
            + "WHERE x.section = ? AND x.key = ?"
            + where
        )
        args = [section, item, *params]
    rows = store.query(sql + " ORDER BY r.created_at, r.run_id, x.profile", args)
    entries = _entries(rows, item, section, read or SectionResult.from_json)
    if run_filter.limit is not None:
        entries = entries[-run_filter.limit :]
    return entries


def _entries(
    rows: list[tuple[Any, ...]], item: str, section: str, read: RecordReader
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
    return [_entry(run_id, profile, run, section) for (run_id, profile), run in by_run.items()]


def _entry(run_id: str, profile: str, run: dict[str, Any], section: str) -> HistoryEntry:
    verdicts: dict[str, str] = run["verdicts"]
    record = run["record"]
    if section == PROBE_RESULTS:
        verdict = _claim_verdict(verdicts)
    elif set(verdicts) == {"both"}:  # one verdict across the environments (a benchmark)
        verdict = verdicts["both"]
    else:
        verdict = ", ".join(f"{role}: {v}" for role, v in sorted(verdicts.items()))
    return HistoryEntry(
        run_id,
        float(run["created"]),
        run["baseline"],
        run["candidate"],
        verdict,
        dict(verdicts),
        *_interval(record),
        profile,
    )


def _interval(record: SectionRecord | None) -> tuple[float | None, float | None, float | None]:
    """A record's ratio and interval, when it is a record that has them."""
    figures = tuple(getattr(record, name, None) for name in ("ratio", "ci_low", "ci_high"))
    if not all(value is None or isinstance(value, float | int) for value in figures):
        return None, None, None  # a plain row's payload, or a field of another meaning
    return figures  # type: ignore[return-value]


def _claim_verdict(verdicts: dict[str, str]) -> str:
    if "baseline" in verdicts and "candidate" in verdicts:
        try:
            pair = Verdict(verdicts["baseline"]), Verdict(verdicts["candidate"])
        except ValueError:
            return "?"
        return compare_claim(*pair).value
    return "incomplete"


def bench_history(
    store: ResultStore,
    run: RunRow,
    bench_ids: list[str],
    read: RecordReader | None = None,
    runs: int = 10,
) -> dict[str, list[HistoryEntry]]:
    """Each benchmark's last ``runs`` results up to and including ``run`` (for its report).

    Runs stored later are left out, so the report rendered again later shows the same.
    Only the store's own profile counts: a fleet profile's history is that hardware's.
    """
    up_to = HistoryFilter(until=run.created_at + 1e-3, limit=runs, profile=store.profile)
    return {bench_id: history(store, bench_id, "bench", up_to, read) for bench_id in bench_ids}
