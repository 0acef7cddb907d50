"""Stores of many runs for the ``publish`` tests and benchmark, filled through the store
API from recorded results (no torch runs): candidates x hardware x build variants.

A run on one machine names its hardware in its manifest (its GPUs); a fleet run stores
each hardware profile's results under that profile, as ``run --fleet`` does.
"""

from __future__ import annotations

import time
from typing import Any

from torchcanary.claims.records import save_probe_result
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.results import Manifest
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SectionResult

BASELINE = "2.13.0"
GPUS = {"h100-8x": "NVIDIA H100 80GB HBM3", "mi300-8x": "AMD Instinct MI300X"}


def fill_qualification(
    store: ResultStore,
    candidate: str,
    hardware: str,
    *,
    ratio: float = 1.0,
    claim: str = "confirmed",
    drill: str = "passed",
    variant: str = "cu130",
    fleet: bool = False,
    created_at: float | None = None,
) -> str:
    """One finished run of ``candidate`` (e.g. '2.14.1rc2') against the baseline on
    ``hardware`` (a key of ``GPUS``): a claim, a benchmark and a drill, and the decision
    the results call for (no-go when the benchmark is slower or the claim regressed)."""
    plan: dict[str, Any] = {
        "baseline": f"torch=={BASELINE}",
        "candidate": f"torch=={candidate}",
        "sections": ["claims", "bench", "drill"],
    }
    run_id = store.create_run(plan)
    if created_at is not None:
        (row,) = store.query(
            "SELECT run_id, created_at, finished_at, status, plan_json, decision, "
            "decision_json FROM runs WHERE run_id = ?",
            (run_id,),
        )
        store.insert_rows("runs", [(row[0], created_at, *row[2:])])
    scoped = store.scoped(f"node-{hardware}", hardware) if fleet else store
    gpus = [] if variant == "cpu" else [{"name": GPUS[hardware], "capability": "9.0"}] * 8
    for role, version in (("baseline", BASELINE), ("candidate", candidate)):
        facts = {
            "torch_version": f"{version}+{variant}",
            "torch_build_variant": variant,
            "gpus": gpus,
            "cpu_model": "AMD EPYC 9654",
        }
        scoped.save_environment(
            run_id, role, plan[role], "/usr/bin/python3.12", version, 1.0, True, Manifest(facts)
        )
    for role, verdict in (("baseline", "confirmed"), ("candidate", claim)):
        outcome = Outcome(Verdict(verdict), f"{role}: {verdict}")
        save_probe_result(
            scoped, ProbeResult(run_id, role, "inductor.fusion", outcome, 0.5, time.time())
        )
    bench = "slower" if ratio > 1.05 else "faster" if ratio < 0.95 else "same"
    interval = {"ratio": ratio, "ci_low": ratio - 0.01, "ci_high": ratio + 0.01, "p": 0.01}
    scoped.save_section_result(
        run_id, SectionResult("bench", "matmul.bf16", "both", bench, interval)
    )
    for role in ("baseline", "candidate"):
        verdict = drill if role == "candidate" else "passed"
        scoped.save_section_result(
            run_id, SectionResult("drill", "kill:restart", role, verdict, {"steps": 30})
        )
    reasons = [f"bench matmul.bf16 is {bench}"] if bench == "slower" else []
    reasons += [f"claim inductor.fusion is {claim}"] if claim != "confirmed" else []
    reasons += [f"drill kill:restart {drill}"] if drill != "passed" else []
    store.finish_run(run_id, "no-go" if reasons else "go", {"reasons": reasons})
    return run_id


T0 = 1_780_000_000.0  # 2026-05-28: runs are placed an hour apart from here


def fill_release_qualification(store: ResultStore) -> dict[str, str]:
    """Three candidates of 2.14.1 on two fleet profiles, and one CPU build on a machine
    of its own; run ids by name ('rc2 h100', ...).

    h100-8x: rc1 go, rc2 no-go (the benchmark slower), final go (closed again).
    mi300-8x: rc1 go, rc2 no-go (the claim refuted), final no-go (the drill failed, though
    the benchmark got faster: an improvement, no regression): open.
    """
    plan = [
        ("rc1 h100", "2.14.1rc1", "h100-8x", {}),
        ("rc1 mi300", "2.14.1rc1", "mi300-8x", {}),
        ("rc2 h100", "2.14.1rc2", "h100-8x", {"ratio": 1.2}),
        ("rc2 mi300", "2.14.1rc2", "mi300-8x", {"claim": "refuted"}),
        ("final h100", "2.14.1", "h100-8x", {}),
        ("final mi300", "2.14.1", "mi300-8x", {"drill": "failed", "ratio": 0.9}),
    ]
    runs = {
        name: fill_qualification(
            store, candidate, hardware, fleet=True, created_at=T0 + 3600 * index, **options
        )
        for index, (name, candidate, hardware, options) in enumerate(plan)
    }
    runs["final cpu"] = fill_qualification(
        store, "2.14.1", "h100-8x", variant="cpu", ratio=0.9, created_at=T0 + 3600 * len(plan)
    )
    return runs
