"""Time the fixture project's transformer block with ``torchcanary bench`` and print the table.

    PYTHONPATH=src python benchmarks/workload_table.py [--groups 6] [--backend inductor]

Runs the real command line, as a user would, in a scratch copy of
``tests/fixtures/workload_project``: ``torchcanary bench --with "-e ." --workload
workload_demo.steps:infer_step`` with a ``canary.toml`` adding the training step eager and
both steps compiled. The full harness runs (A/A control, fresh worker groups, the run's
statistics). Prints per workload: step or cold-compile time on each side, verdict with its
interval, graphs, graph breaks, recompiles, peak memory, numerics and whether what ran
(operators, kernels, library calls) changed; then how long the whole command took.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary.bench.report import format_seconds
from torchcanary.report.view import load_run_view
from torchcanary.store.sqlite import SqliteStore
from torchcanary.worker.bench.specs import human_bytes

PROJECT = Path(__file__).parents[1] / "tests" / "fixtures" / "workload_project"
STEPS = "workload_demo.steps"


def _config(groups: int, backend: str, timeout_s: float) -> str:
    compiled = f'mode = "compile"\ncompile = {{backend = "{backend}"}}\n'
    return f"""[bench]
families = []
groups = {groups}
timeout_s = {timeout_s}

[[bench.benchmarks]]
kind = "workload"
target = "{STEPS}:train_step"
rtol = 1e-4
atol = 1e-5

[[bench.benchmarks]]
kind = "workload"
target = "{STEPS}:train_step"
{compiled}
[[bench.benchmarks]]
kind = "workload"
target = "{STEPS}:infer_step"
{compiled}"""


def _pair(payload: dict[str, Any], key: str, show: Any) -> str:
    facts = payload.get("workload") or {}
    values = [(facts.get(role) or {}).get(key) for role in ("baseline", "candidate")]
    if all(v in (None, []) for v in values):
        return "–"
    return " -> ".join(show(v) for v in values)


def _counts(value: Any) -> str:
    return "–" if not value else "/".join(map(str, value))


def _row(key: str, verdict: str, payload: dict[str, Any]) -> list[str]:
    sides = payload.get("sides") or {}
    interval = (
        f"{payload['ratio']:.3f} [{payload['ci_low']:.3f}, {payload['ci_high']:.3f}]"
        if payload.get("ratio") is not None
        else str(payload.get("reason", ""))[:60]
    )
    changed = (payload.get("dispatch_diff") or {}).get("changes") or {}
    kernels = ", ".join(
        f"{view} {sum(len(v) for v in change.values())}" for view, change in changed.items()
    )
    numerics = payload.get("numerics") or {}
    return [
        key.removeprefix("workload/"),
        verdict,
        format_seconds((sides.get("baseline") or {}).get("median_s")),
        format_seconds((sides.get("candidate") or {}).get("median_s")),
        interval,
        _pair(payload, "graphs", _counts),
        _pair(payload, "graph_breaks", _counts),
        _pair(payload, "recompiles", _counts),
        _pair(payload, "peak_memory_bytes", lambda v: "–" if not v else human_bytes(v)),
        ("differ" if numerics.get("drift") else "match") if numerics.get("compared") else "–",
        kernels or ("none" if "dispatch_diff" in payload else "–"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds per worker call (bench timeout_s)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="workload-table-") as scratch:
        project = Path(scratch) / "project"
        shutil.copytree(PROJECT, project)
        (project / "canary.toml").write_text(_config(args.groups, args.backend, args.timeout))
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "torchcanary.cli",
                "bench",
                "--baseline",
                args.baseline,
                "--candidate",
                args.candidate,
                "--with",
                "-e .",
                "--workload",
                f"{STEPS}:infer_step",
                "--store",
                str(Path(scratch) / "canary.db"),
                "--output",
                str(Path(scratch) / "out"),
                "--quiet",
            ],
            cwd=project,
            capture_output=True,
            text=True,
        )
        elapsed = time.monotonic() - started
        if done.returncode not in (0, 1):
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
            return done.returncode
        with SqliteStore(Path(scratch) / "canary.db") as store:
            run = store.latest_run()
            assert run is not None
            view = load_run_view(store, run.run_id)
            rows = [_row(r.key, r.verdict, r.payload) for r in view.sections.get("bench", [])]
    head = [
        "workload",
        "verdict",
        "baseline",
        "candidate",
        "ratio [interval]",
        "graphs",
        "breaks",
        "recompiles",
        "peak memory",
        "outputs",
        "what ran changed",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in sorted(rows):
        print("| " + " | ".join(row) + " |")
    print(
        f"\n`torchcanary bench` exit {done.returncode}, {elapsed:.0f} s wall "
        f"({args.groups} worker groups, A/A control, {args.backend}), "
        f"{args.baseline} vs {args.candidate}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
