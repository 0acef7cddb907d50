"""Building realistic runs in a store for the store, history and compare tests.

``python store_helpers.py LOCATION N`` is also a writer process: it creates one run and
commits N probe results to it one by one, as a run's claims section does, then prints the
run id. The concurrency and kill tests start several of these.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from torchcanary.claims.records import done_probe_keys, save_probe_result
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.results import Manifest
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SectionResult

BASELINE = "torch==2.13.0 numpy"
CANDIDATE = "torch==2.14.1 numpy"


def fill_run(
    store: ResultStore,
    candidate_torch: str = "2.14.1",
    ratio: float = 1.10,
    bench_verdict: str = "slower",
    claim: tuple[str, str] = ("confirmed", "confirmed"),
    drill_verdict: str = "passed",
    created_at: float | None = None,
) -> str:
    """A finished run with environments, a claim, a benchmark, a drill and an artifact."""
    plan: dict[str, Any] = {
        "baseline": BASELINE,
        "candidate": f"torch=={candidate_torch} numpy",
        "sections": ["claims", "bench", "drill"],
        "note": 'unicode é ✓ and "quotes"',
    }
    run_id = store.create_run(plan)
    if created_at is not None:  # history tests place runs in time
        _set_created(store, run_id, created_at)
    for role, version in (("baseline", "2.13.0"), ("candidate", candidate_torch)):
        store.save_environment(
            run_id,
            role,
            plan[role],
            "/usr/bin/python3.11",
            version,
            12.5,
            True,
            Manifest({"torch_version": version, "blas": "openblas", "threads": 2}),
        )
    for role, verdict in zip(("baseline", "candidate"), claim, strict=True):
        save_probe_result(
            store,
            ProbeResult(
                run_id,
                role,
                "inductor.fusion",
                Outcome(
                    Verdict(verdict),
                    f"{role} says {verdict}",
                    {"code": "def f(x):\n    return x * 2\n", "value": 0.1 + 0.2},
                    {"latency_s": [0.001, 0.0011, 1e-9]},
                ),
                1.25,
                time.time(),
            ),
        )
    store.save_section_result(
        run_id,
        SectionResult(
            "bench",
            "matmul.fp32",
            "both",
            bench_verdict,
            {"ratio": ratio, "ci_low": ratio * 0.98, "ci_high": ratio * 1.02, "p": 1 / 3},
        ),
    )
    for role in ("baseline", "candidate"):
        store.save_section_result(
            run_id, SectionResult("drill", "kill:restart", role, drill_verdict, {"steps": 30})
        )
    store.save_measurement(run_id, "baseline", "matmul.fp32", "wall_s", [0.5, 0.25, 0.125])
    store.save_artifact(run_id, "dump.bin", "application/octet-stream", b'{"x": 1}\x00\xff')
    store.finish_run(run_id, "no-go" if bench_verdict == "slower" else "go", {"reasons": ["r"]})
    return run_id


def _set_created(store: ResultStore, run_id: str, created_at: float) -> None:
    (row,) = store.query(
        "SELECT run_id, created_at, finished_at, status, plan_json, decision, decision_json "
        "FROM runs WHERE run_id = ?",
        (run_id,),
    )
    store.insert_rows("runs", [(row[0], created_at, *row[2:])])


def write_results(store: ResultStore, count: int, run_id: str | None = None) -> str:
    """Commit ``count`` probe results to a run (a new one unless ``run_id``), one by one."""
    run_id = run_id or store.create_run({"baseline": BASELINE, "candidate": CANDIDATE})
    done = done_probe_keys(store, run_id)
    for index in range(count):
        if ("candidate", f"p{index:05d}") in done:
            continue  # resumed: what was committed stays as it was
        save_probe_result(
            store,
            ProbeResult(
                run_id,
                "candidate",
                f"p{index:05d}",
                Outcome(Verdict.CONFIRMED, "ok", {"i": index}, {"s": [float(index)]}),
                0.01,
                time.time(),
            ),
        )
    return run_id


if __name__ == "__main__":
    from torchcanary.store.location import open_store

    location, total = sys.argv[1], int(sys.argv[2])
    resume = sys.argv[3] if len(sys.argv) > 3 else None
    with open_store(location) as opened:
        if resume is None:
            run = opened.create_run({"baseline": BASELINE, "candidate": CANDIDATE})
            print(run, flush=True)
        write_results(opened, total, resume or run)
    print("done", flush=True)
