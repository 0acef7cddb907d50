"""What a benchmark's stored payload holds: each side's summary and the judged comparison,
or why it was skipped; the harness settings it ran under; and what else was measured
(roofline, collective bandwidth, dispatch, workload facts, compile phases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchcanary.bench import compare
from torchcanary.bench.confounds import affecting
from torchcanary.bench.dispatch_diff import diff as dispatch_diff
from torchcanary.bench.interleave import Measurements
from torchcanary.bench.samples import BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.workload_checks import compare_numerics, summarise_facts
from torchcanary.worker.bench.roofline import collective_bandwidth, fraction
from torchcanary.worker.bench.specs import WORKLOAD


def _harness(
    samples: BenchmarkSamples,
    settings: BenchSettings,
    seed: int,
    measurements: Measurements | None = None,
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "groups": settings.groups,
        "rounds": settings.rounds,
        "samples_per_round": settings.samples_per_round,
        "min_sample_ms": settings.min_sample_ms,
        "number": samples.number,
        "batch_size": samples.batch_size,
        "seed": seed,
        "measure_s": samples.measure_s,
        "groups_measured": len({b.group for batches in samples.batches.values() for b in batches}),
        "threads": settings.threads,
    }
    if measurements is not None:
        started = [w for w in measurements.workers if w.get("status") == "ok"]
        facts.update(
            device=measurements.device,
            device_note=measurements.device_note,
            affinity=sorted({c for w in started for c in w.get("affinity", [])}),
            timer=started[0].get("clock") if started else None,
            torch_threads=sorted({int(w.get("threads") or 0) for w in started}),
            groups_run=measurements.groups_run,
            ended_by=measurements.ended_by,
        )
    return facts


def skipped_payload(
    samples: BenchmarkSamples, sides: list[Side], settings: BenchSettings, seed: int
) -> dict[str, Any]:
    names = {side.name: side.store_role for side in sides}
    reasons = {names[s]: r for s, r in samples.skipped.items()}
    failures = {names[s]: f for s, f in samples.failed.items()}
    first = next(iter(failures.values()), None)
    reason = (
        f"{first['status']}: {first['error']}"
        if first
        else next(iter(reasons.values()), "not measured")
    )
    if len({f["error"] for f in failures.values()}) > 1:  # differs between versions: say so
        reason = "; ".join(f"{role}: {f['status']}: {f['error']}" for role, f in failures.items())
    return {
        "kind": samples.spec["kind"],
        "spec": samples.spec,
        "aa": settings.aa,
        "reason": reason,
        "skipped": reasons,
        "failed": failures,
        "harness": _harness(samples, settings, seed),
    }


def measured_payload(
    samples: BenchmarkSamples,
    sides: list[Side],
    pair: dict[str, Any],
    decided: dict[str, Any],
    measurements: Measurements,
    settings: BenchSettings,
    seed: int,
    confounds: dict[str, Any],
    work_dir: Path,
) -> dict[str, Any]:
    """A measured benchmark's stored payload: its judged comparison, each side's summary,
    and what else was measured (roofline, bandwidth, dispatch, workload facts)."""
    ab, aa = decided["ab"], decided.get("aa")  # as calibrated against the A/A controls
    clock = ab.get("clock", "wall")
    summaries = {side.store_role: compare.summary(samples, side.name, clock) for side in sides}
    spec = samples.spec
    roofline, bandwidth = _placed(spec, sides, summaries, measurements)
    payload: dict[str, Any] = {
        "kind": spec["kind"],
        "spec": spec,
        "aa": settings.aa,
        "sides": summaries,
        "comparison": ab,
        "ratio": ab.get("ratio"),
        "ci_low": ab.get("ci_low"),
        "ci_high": ab.get("ci_high"),
        # The level the verdict was decided at (see verdicts.decide), not a per-comparison one.
        "confidence": ab.get("ci_level", 1 - settings.fdr),
        "equivalence": settings.equivalence,
        "clock": clock,
        "p_value": ab.get("p_value"),
        "q_value": decided.get("q_ab"),
        "mde": decided["mde"],
        "mde_alpha": decided.get("mde_alpha"),
        "aa_control": ({**aa, "q_value": decided.get("q_aa")} if aa else None),
        "reasons": decided["reasons"],
        "calibration": decided["calibration"],
        "noise_warnings": compare.noise_warnings(samples, summaries, ab, settings.noise_cv),
        "roofline": roofline,
        "machine_roofline": measurements.roofline,
        "confounds": affecting(spec, confounds),
        "harness": _harness(samples, settings, seed, measurements),
    }
    if bandwidth:
        payload["collective_bandwidth"] = bandwidth
    payload.update(_what_ran(samples, sides, work_dir))
    if decided.get("stopped"):
        payload["settled"] = decided["stopped"]
    return payload


def _what_ran(samples: BenchmarkSamples, sides: list[Side], work_dir: Path) -> dict[str, Any]:
    """What ran on each side beyond its times: dispatch profiles and their difference, a
    workload's facts and numerics, or a one-shot benchmark's compile phases."""
    facts: dict[str, Any] = {}
    spec = samples.spec
    if samples.dispatch:
        facts["dispatch"] = samples.dispatch
        if "baseline" in samples.dispatch and "candidate" in samples.dispatch:
            facts["dispatch_diff"] = dispatch_diff(
                samples.dispatch["baseline"], samples.dispatch["candidate"]
            )
    if spec["kind"].startswith("workload"):
        facts["workload"] = {
            side.store_role: summarise_facts(samples.extras.get(side.name, [])) for side in sides
        }
        if spec["kind"] == WORKLOAD:
            facts["numerics"] = compare_numerics(work_dir, samples.bench_id, spec)
    elif samples.extras:
        facts["oneshot"] = _oneshot_facts(samples, sides)
    return facts


def _placed(
    spec: dict[str, Any],
    sides: list[Side],
    summaries: dict[str, dict[str, Any]],
    measurements: Measurements,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each side's median placed on its machine's roofline, and a collective's bandwidth,
    by stored role; sides where neither applies are left out."""
    roofline, bandwidth = {}, {}
    for side in sides:
        centre = summaries[side.store_role].get("median_s", 0.0)
        placed = fraction(spec, centre, measurements.roofline.get(side.role, {}))
        if placed is not None:
            roofline[side.store_role] = placed
        moved = collective_bandwidth(spec, centre)
        if moved is not None:
            bandwidth[side.store_role] = moved
    return roofline, bandwidth


def _oneshot_facts(samples: BenchmarkSamples, sides: list[Side]) -> dict[str, Any]:
    """Per side: compile phases (median seconds), graph breaks and recompiles seen."""
    facts: dict[str, Any] = {}
    for side in sides:
        extras = samples.extras.get(side.name, [])
        phases: dict[str, list[float]] = {}
        for extra in extras:
            for phase, seconds in (extra.get("phases") or {}).items():
                phases.setdefault(phase, []).append(seconds)
        facts[side.store_role] = {
            "phases_s": {p: compare.stats.median(v) for p, v in phases.items()},
            "graph_breaks": sorted({e["graph_breaks"] for e in extras if "graph_breaks" in e}),
            "recompiles": sorted({e["recompiles"] for e in extras if "recompiles" in e}),
            "graphs": sorted({e["graphs"] for e in extras if "graphs" in e}),
        }
    return facts
