"""The claims' rows in the store: each probe result in ``probe_results`` (the claims'
``result_table``) with the measurements it carries, through the store's generic rows.

The store knows no claim; what a probe result is, and how it is written and read back,
is said here once.
"""

from __future__ import annotations

import json
from typing import Any

from torchcanary.probe_result import Outcome, ProbeResult
from torchcanary.store.base import ResultStore
from torchcanary.store.schema import TABLE_COLUMNS

TABLE = "probe_results"
# What a row holds beyond its run and its scope (node, profile), in the schema's order.
_COLUMNS = tuple(c for c in TABLE_COLUMNS[TABLE] if c not in ("run_id", "node", "profile"))


def save_probe_result(store: ResultStore, result: ProbeResult) -> None:
    """``result`` and its measurements, kept together or not at all."""
    outcome = result.outcome
    row = {
        "run_id": result.run_id,
        "env_role": result.env_role,
        "probe_id": result.probe_id,
        "verdict": outcome.verdict.value,
        "summary": outcome.summary,
        "evidence_json": json.dumps(outcome.evidence, default=str),
        "duration_s": result.duration_s,
        "started_at": result.started_at,
    }
    series_rows = [
        {
            "run_id": result.run_id,
            "env_role": result.env_role,
            "source": result.probe_id,
            "series": series,
            "values_json": json.dumps(values),
        }
        for series, values in outcome.measurements.items()
    ]
    store.save_rows(
        "save a probe result",
        [(TABLE, row), *(("measurements", series_row) for series_row in series_rows)],
    )


def probe_results(store: ResultStore, run_id: str) -> list[ProbeResult]:
    """Every probe result of ``run_id`` in ``store``'s profile, by probe then role."""
    rows = store.rows(TABLE, run_id, _COLUMNS, order_by=("probe_id", "env_role"))
    series_rows = store.rows(
        "measurements", run_id, ("env_role", "source", "series", "values_json")
    )
    by_source: dict[tuple[str, str], dict[str, Any]] = {}
    for role, source, series, values in series_rows:
        by_source.setdefault((role, source), {})[series] = json.loads(values)
    results = []
    for role, probe_id, verdict, summary, evidence, duration, started in rows:
        outcome = Outcome.from_json(
            {
                "verdict": verdict,
                "summary": summary,
                "evidence": json.loads(evidence),
                "measurements": by_source.get((role, probe_id), {}),
            }
        )
        results.append(ProbeResult(run_id, role, probe_id, outcome, duration, started))
    return results


def done_probe_keys(store: ResultStore, run_id: str) -> set[tuple[str, str]]:
    """``(env_role, probe_id)`` of every probe already stored for ``run_id``: what
    ``--resume`` skips."""
    return {(role, probe_id) for role, probe_id in store.rows(TABLE, run_id, _COLUMNS[:2])}
