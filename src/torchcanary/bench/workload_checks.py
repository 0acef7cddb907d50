"""What a user's workload reports besides its times: compile facts, memory, numerics.

Orchestrator side (no torch): the worker leaves facts with each preparation and, in the
first round group, records the first outputs of a seeded build in each environment; here
the facts are summarised per side and the outputs compared with the user's tolerance
(``numerics_diff.py``, the same comparison the stack uses for recorded tensors).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from torchcanary.numerics_diff import compare_directories


def numerics_dir(work_dir: Path, bench_id: str, role: str) -> Path:
    """Where one environment's outputs of one workload are recorded."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", bench_id)
    return Path(work_dir) / "bench-numerics" / safe / role


def compare_numerics(work_dir: Path, bench_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Baseline and candidate outputs, element by element, within ``rtol``/``atol``."""
    baseline = numerics_dir(work_dir, bench_id, "baseline")
    candidate = numerics_dir(work_dir, bench_id, "candidate")
    if not baseline.is_dir() or not candidate.is_dir():
        return {"compared": 0, "drift": False, "reason": "not recorded in both environments"}
    comparisons = compare_directories(
        baseline, candidate, rtol=spec.get("rtol"), atol=spec.get("atol")
    )
    drifted = [c for c in comparisons if c.drift]
    if not comparisons:
        reason = "the step returned no tensors to compare"
    elif drifted:
        reason = "; ".join(f"{c.name}: {c.reason}" for c in drifted[:3])
    else:
        worst = max(c.max_abs_err for c in comparisons)
        reason = f"{len(comparisons)} output(s) within tolerance (max abs error {worst:.3g})"
    return {
        "compared": len(comparisons),
        "drift": bool(drifted),
        "reason": reason,
        "rtol": spec.get("rtol"),
        "atol": spec.get("atol"),
        "outputs": [c.to_json() for c in comparisons[:20]],
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise_facts(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's facts over its round groups: medians of times, the sets of counts seen."""
    summary: dict[str, Any] = {
        "setup_s": _median([f["setup_s"] for f in facts if "setup_s" in f]),
        "first_call_s": _median([f["first_call_s"] for f in facts if "first_call_s" in f]),
        "output": next((f["output"] for f in facts if "output" in f), None),
    }
    peaks = [f["peak_memory"]["bytes"] for f in facts if (f.get("peak_memory") or {}).get("bytes")]
    # The median over groups: whichever benchmark a worker prepares first also pays the
    # libraries' one-time growth (lazy kernels, thread pools), which is not this workload's.
    summary["peak_memory_bytes"] = int(statistics.median(peaks)) if peaks else None
    summary["peak_memory_how"] = next(
        (f["peak_memory"]["how"] for f in facts if f.get("peak_memory")), None
    )
    if any("cold_compile_s" in f for f in facts):
        summary["cold_compile_s"] = _median([f["cold_compile_s"] for f in facts])
        for count in ("graphs", "graph_breaks", "recompiles"):
            summary[count] = sorted({int(f[count]) for f in facts if count in f})
        summary["break_reasons"] = sorted({r for f in facts for r in f.get("break_reasons", [])})[
            :5
        ]
    return summary
