"""What recording a user's torch calls costs: a fixture suite and a workload, same run.

    PYTHONPATH=src python benchmarks/recording_overhead.py [--env torch==2.13.0] [--rounds 3]
    PYTHONPATH=src python benchmarks/recording_overhead.py --python OVERLAY/bin/python \\
        --suite "pytest -q --pyargs tensorly" --var TENSORLY_BACKEND=pytorch

The second times a real suite instead (``--python``: an interpreter with its project
installed, such as the calls section's baseline overlay), recorded and unrecorded in turn.

Inside the environment's own interpreter, recorded and unrecorded runs alternate (so drift
in the machine's load hits both alike):

- suite: ``pytest`` on tests/fixtures/stack_project (pytest is linked in from this venv),
  wall time of the whole process, recorded through the plugin and its variable;
- workload: a small MLP's training steps, timed inside the process around the loop, recorded
  with ``record_calls``.

Prints each median time, the ratio recorded/unrecorded, and the calls recorded (in all, and
distinct: what replay will run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import import_root_for
from torchcanary.worker import calls

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "tests" / "fixtures" / "stack_project"
WORKLOAD = """
import contextlib, os, sys, time
import torch
from torchcanary.worker.replay.record import record_calls
folder = os.environ.get("RECORD_TO")
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with record_calls(folder) if folder else contextlib.nullcontext():
    started = time.perf_counter()
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(time.perf_counter() - started)
"""


def _suite_once(
    python: str, root: Path, folder: Path | None, suite: list[str], where: dict[str, Any]
) -> float:
    """One run of ``suite`` (``where``: its ``cwd`` and ``variables``), recorded into
    ``folder`` unless it is None."""
    environ = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{SUITE / 'src'}"}
    environ.update(where["variables"])
    command = [python, "-m", *suite]
    if folder is not None:
        environ[calls.CALLS_RECORD_VAR] = str(folder)
        command += ["-p", calls.CALLS_RECORD_PLUGIN]
    started = time.perf_counter()
    subprocess.run(command, env=environ, cwd=where["cwd"], capture_output=True, timeout=3600)
    return time.perf_counter() - started


def _workload_once(python: str, root: Path, folder: Path | None, steps: int) -> float:
    environ = {**os.environ, "PYTHONPATH": str(root)}
    if folder is not None:
        environ["RECORD_TO"] = str(folder)
    code = WORKLOAD.replace("STEPS", str(steps))
    done = subprocess.run(
        [python, "-c", code], env=environ, capture_output=True, text=True, timeout=600, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def _report(name: str, plain: list[float], recorded: list[float], folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    base, rec = statistics.median(plain), statistics.median(recorded)
    print(
        f"{name}: unrecorded {base:.3f} s, recorded {rec:.3f} s, ratio {rec / base:.2f}; "
        f"calls recorded {meta['calls']}, distinct {meta['distinct']} in {meta.get('groups')} "
        f"groups, {meta.get('not_sampled')} past their group's sample, "
        f"{meta.get('not_examined', 0)} counted while the recorder rested (quiet "
        f"{meta.get('quiet')}), not replayable {sum(meta['not_replayable'].values())}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="torch==2.13.0 numpy", help="the environment's spec")
    parser.add_argument("--rounds", type=int, default=3, help="recorded/unrecorded pairs")
    parser.add_argument("--steps", type=int, default=200, help="the workload's training steps")
    parser.add_argument("--suite", help="a pytest command to time instead of the fixture's")
    parser.add_argument("--python", help="the interpreter --suite runs in (default: --env's)")
    parser.add_argument("--var", action="append", default=[], help="KEY=VALUE for --suite")
    args = parser.parse_args()
    python = args.python or ensure_environment("baseline", parse_env_spec(args.env)).python
    fixture = ["pytest", "-q", "-p", "no:cacheprovider", str(SUITE / "tests")]
    suite = shlex.split(args.suite) if args.suite else fixture
    with tempfile.TemporaryDirectory() as scratch:
        packages = (
            "torchcanary",
            "pytest",
            "_pytest",
            "py",
            "pluggy",
            "iniconfig",
            "packaging",
            "pygments",
        )
        root = import_root_for(packages, Path(scratch) / "root")
        folder = Path(scratch) / "recording"
        timings: dict[str, tuple[list[float], list[float]]] = {
            "suite": ([], []),
            "workload": ([], []),
        }
        where = {
            "cwd": scratch if args.suite else SUITE,
            "variables": dict(item.split("=", 1) for item in args.var),
        }
        if args.suite:
            del timings["workload"]  # a real suite's figures alone
        for _ in range(args.rounds):
            timings["suite"][0].append(_suite_once(python, root, None, suite, where))
            recorded = _suite_once(python, root, folder / "suite", suite, where)
            timings["suite"][1].append(recorded)
            if not args.suite:
                timings["workload"][0].append(_workload_once(python, root, None, args.steps))
                recorded = _workload_once(python, root, folder / "workload", args.steps)
                timings["workload"][1].append(recorded)
        print(f"environment: {python} ({args.suite or args.env}), {args.rounds} rounds")
        for name, (plain, recorded_times) in timings.items():
            _report(name, plain, recorded_times, folder / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
