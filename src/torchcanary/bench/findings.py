"""What of the bench's results deserves explaining (its part of the ``findings`` contract):
every benchmark judged slower or faster, with how the explain section measures it again."""

from __future__ import annotations

from typing import Any

from torchcanary.bench.result import BenchMeasured, BenchVerdict, from_rows
from torchcanary.section_types import Finding, RunView
from torchcanary.worker.bench.specs import STARTUP, STEADY_KINDS, WORKLOAD
from torchcanary.worker.calls import EXPLAIN_ONESHOT_STARTUP, EXPLAIN_STEADY

SECTION = "bench"
_MOVED = (BenchVerdict.SLOWER, BenchVerdict.FASTER)
_SAMPLES_PER_MEASUREMENT = 5


def _remeasure(record: BenchMeasured) -> dict[str, Any] | None:
    """One more sample of this benchmark as a worker call (None: not re-runnable alone)."""
    threads = int(record.harness.get("threads") or 1)
    if record.kind in STEADY_KINDS and record.kind != WORKLOAD:
        kwargs = {"spec": record.spec, "threads": threads, "count": _SAMPLES_PER_MEASUREMENT}
        return {"call": EXPLAIN_STEADY, "kwargs": kwargs}
    if record.kind == STARTUP and record.spec.get("device", "cpu") == "cpu":
        kwargs = {"measure": record.spec["measure"], "threads": threads}
        return {"call": EXPLAIN_ONESHOT_STARTUP, "kwargs": kwargs}
    return None


def _delta(record: BenchMeasured) -> str:
    assert record.ratio is not None
    interval = (
        f" [{record.ci_low - 1:+.0%}, {record.ci_high - 1:+.0%}]"
        if record.ci_low is not None and record.ci_high is not None
        else ""
    )
    return f"{record.ratio - 1:+.0%}{interval} ({record.verdict})"


def _moved(record: BenchMeasured) -> bool:
    """Judged slower or faster. A benchmark with no detected change is no finding, however
    far its estimate lies: explaining noise spends the budget and reads as a cause."""
    return record.verdict in _MOVED


def moved(view: RunView) -> list[BenchMeasured]:
    """The bench's reading of a run for its findings: every benchmark (not an A/A control)
    that moved (see :func:`_moved`) and has a ratio. ``repro`` reads the same list."""
    return [
        record
        for record in from_rows(view.sections.get(SECTION, []))
        if isinstance(record, BenchMeasured)
        and _moved(record)
        and not record.aa
        and record.ratio is not None
    ]


def finding(record: BenchMeasured) -> Finding:
    """One moved benchmark as a finding, with the facts that explain and repro read."""
    return Finding(
        section=SECTION,
        item=record.key,
        kind="timing",
        delta=_delta(record),
        ratio=record.ratio,
        ci_low=record.ci_low,
        ci_high=record.ci_high,
        remeasure=_remeasure(record),
        facts={
            "kind": record.kind,
            "spec": record.spec,
            "threads": int(record.harness.get("threads") or 1),
            "clock": record.clock,  # "cpu": process CPU time, else wall time
            "dispatch_diff": record.dispatch_diff,  # the ops explanation links it
        },
    )


def findings(view: RunView) -> list[Finding]:
    """Every benchmark that moved, as a finding."""
    return [finding(record) for record in moved(view)]
