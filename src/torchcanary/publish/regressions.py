"""The open regressions: on each hardware and build variant whose latest run (of any
candidate) is no-go, that run set against the last go run on the same hardware and build,
with ``torchcanary compare``'s own code (``history.compare.compare_runs``), keeping only
the changes for the worse (``history.compare.for_the_worse``: to a verdict its section
declares worse), so the list is exactly the worse part of what ``compare GO NO_GO`` says;
an improvement is no regression. A later go run on the same hardware and build
closes it; one with no earlier go run lists its blocking reasons only.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from torchcanary.history.compare import compare_runs, for_the_worse
from torchcanary.publish.inventory import Cell, RunInfo, latest_per_cell
from torchcanary.store.base import ResultStore

NO_GO = "no-go"
GO = "go"


def open_regressions(store: ResultStore, infos: list[RunInfo]) -> list[dict[str, Any]]:
    """One entry per hardware and build whose latest run is no-go, most recent first: the
    run, the last go before it, what changed for the worse between them."""
    found = []
    latest_per_series: dict[str, tuple[Cell, RunInfo]] = {}
    for cell, info in latest_per_cell(infos).items():
        known = latest_per_series.get(cell.series)
        if known is None or (known[1].created_at, known[1].run_id) < (info.created_at, info.run_id):
            latest_per_series[cell.series] = (cell, info)
    for cell, latest in latest_per_series.values():
        if latest.decision != NO_GO:
            continue
        since = _last_go(infos, cell, latest)
        changes: list[dict[str, Any]] = []
        if since is not None:
            compared = compare_runs(store, since.run_id, latest.run_id)
            changes = [
                asdict(change)
                for change in compared.changes
                if change.profile == cell.profile and for_the_worse(change)
            ]
        found.append(
            {
                "candidate": cell.candidate,
                "variant": cell.variant,
                "hardware": cell.hardware,
                "run": latest.run_id,
                "created_at": latest.created_at,
                "last_go": since.run_id if since else None,
                "reasons": latest.reasons,
                "changes": changes,
            }
        )
    return sorted(found, key=lambda entry: (-entry["created_at"], entry["hardware"]))


def _last_go(infos: list[RunInfo], cell: Cell, latest: RunInfo) -> RunInfo | None:
    """The most recent go run before ``latest`` on the cell's hardware and build variant."""
    earlier = [
        info
        for info in infos
        if info.decision == GO
        and (info.created_at, info.run_id) < (latest.created_at, latest.run_id)
        and any(c.series == cell.series for c in info.cells)
    ]
    return max(earlier, key=lambda info: (info.created_at, info.run_id), default=None)


def as_text(regressions: list[dict[str, Any]]) -> str:
    """The list for chat and scripts: a line per cell, then an indented line per change."""
    if not regressions:
        return "no open regressions: every cell's latest run is go (or undecided)\n"
    lines = []
    for entry in regressions:
        since = f"since go run {entry['last_go']}" if entry["last_go"] else "no earlier go run"
        lines.append(
            f"NO-GO {entry['candidate']} +{entry['variant']} on {entry['hardware']}: "
            f"run {entry['run']} ({since})"
        )
        lines += [f"  blocks: {reason}" for reason in entry["reasons"]]
        for change in entry["changes"]:
            detail = f" ({change['detail']})" if change["detail"] else ""
            lines.append(
                f"  {change['section']} {change['item']}: {change['before']} -> "
                f"{change['after']}{detail}"
            )
    return "\n".join(lines) + "\n"
