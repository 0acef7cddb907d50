"""The bench's part of ``torchcanary repro``: of the benchmarks its findings read
(:func:`torchcanary.bench.findings.moved`), each judged slower, with an interval, whose
kernel a script can time alone on the CPU (importing torch; a linear or a matrix product; a
user's workload, whose script the writer declines where it needs more than its file)."""

from __future__ import annotations

from dataclasses import replace

from torchcanary.bench.findings import finding, moved
from torchcanary.bench.result import BenchMeasured, BenchVerdict
from torchcanary.section_types import Finding, RunView
from torchcanary.worker.bench.specs import STARTUP, WORKLOAD

# steady kinds a script builds from their spec alone (a workload: from its target and params)
_KERNELS = ("linear", "gemm", WORKLOAD)


def _scriptable(record: BenchMeasured) -> bool:
    spec = record.spec
    if spec.get("device", "cpu") != "cpu":
        return False
    if record.kind == STARTUP:
        return spec.get("measure") == "import_torch"
    return record.kind in _KERNELS


def _call_s(record: BenchMeasured) -> float | None:
    """The baseline's median seconds per call in the run: the script sizes its timed loop
    by it (None for a fresh import, or where the run has none)."""
    median = record.sides.get("baseline", {}).get("median_s")
    return float(median) if record.kind != STARTUP and median else None


def reproducible(view: RunView) -> list[Finding]:
    """The bench's findings (kind ``timing``) judged slower that a script can time alone."""
    chosen = [
        record
        for record in moved(view)
        if record.verdict is BenchVerdict.SLOWER
        and record.ci_low is not None
        and record.ci_high is not None
        and _scriptable(record)
    ]
    return [
        replace(found, facts={**found.facts, "call_s": _call_s(record)})
        for record, found in zip(chosen, map(finding, chosen), strict=True)
    ]
