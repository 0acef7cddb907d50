"""The bench's part of ``torchcanary repro``: each benchmark judged slower whose kernel a
script can time alone (importing torch; a linear or a matrix product on the CPU), with its
spec, threads, the clock it was judged on and the run's ratio and interval."""

from __future__ import annotations

from torchcanary.bench.result import BenchMeasured, BenchVerdict, from_rows
from torchcanary.section_types import Finding, RunView
from torchcanary.worker.bench.specs import STARTUP

SECTION = "bench"
KIND = "timing"  # the repro writer that reads these findings
_KERNELS = ("linear", "gemm")  # steady kinds a script builds from their spec alone


def _scriptable(record: BenchMeasured) -> bool:
    spec = record.spec
    if spec.get("device", "cpu") != "cpu":
        return False
    if record.kind == STARTUP:
        return spec.get("measure") == "import_torch"
    return record.kind in _KERNELS


def reproducible(view: RunView) -> list[Finding]:
    """Every benchmark (not an A/A control) judged slower that a script can time alone."""
    return [
        Finding(
            section=SECTION,
            item=record.key,
            kind=KIND,
            delta=f"slower: x{record.ratio:.3f} [{record.ci_low:.3f}, {record.ci_high:.3f}]",
            ratio=record.ratio,
            ci_low=record.ci_low,
            ci_high=record.ci_high,
            facts={
                "kind": record.kind,
                "spec": dict(record.spec),
                "threads": int(record.harness.get("threads") or 1),
                "clock": record.clock,  # "cpu": process CPU time, else wall time
            },
        )
        for record in from_rows(view.sections.get(SECTION, []))
        if isinstance(record, BenchMeasured)
        and record.verdict is BenchVerdict.SLOWER
        and not record.aa
        and record.ratio is not None
        and record.ci_low is not None
        and record.ci_high is not None
        and _scriptable(record)
    ]
