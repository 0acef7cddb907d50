"""What one worker costs: CPU seconds from its start to its close, against a bare import.

A run starts hundreds of processes that import torch (workers, ranks, samples); on the
two-core machines the suite and the main job run on, their CPU is the wall time. This
starts workers the way sections do (``WorkerProcess``: start, one call that imports torch,
``close()``) in each environment, interleaved with the same interpreter running
``import torch`` and ending the ordinary way, and prints per environment the median CPU
seconds of each, their ratio, and how long ``close()`` waited. Usage:

    python benchmarks/worker_cost.py                       # every cached environment
    python benchmarks/worker_cost.py --rounds 9 PYTHON ... # these interpreters

Run it on an otherwise idle machine: CPU seconds move less than wall seconds under load, but
a busy machine still slows an import.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from torchcanary.envs.cache import cache_root
from torchcanary.envs.worker_process import WorkerProcess, import_root_for

IMPORTS_TORCH = "torchcanary.worker.devices:available_devices"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_worker(python: str, root: Path) -> tuple[float, float]:
    """CPU seconds of one worker's whole life, and the seconds ``close()`` waited."""
    before = children_cpu()
    worker = WorkerProcess(python, root)
    called = worker.call(IMPORTS_TORCH, {}, 300)
    if not called.ok:
        raise SystemExit(f"{python}: the worker could not import torch: {called.error}")
    started = time.monotonic()
    worker.close()
    return children_cpu() - before, time.monotonic() - started


def bare_import(python: str) -> float:
    """CPU seconds of ``python -c 'import torch'`` ending as any script does."""
    before = children_cpu()
    subprocess.run(
        [python, "-c", "import torch"], check=True, timeout=300, stderr=subprocess.DEVNULL
    )
    return children_cpu() - before


def cached_pythons() -> list[str]:
    found = sorted((cache_root() / "envs").glob("*/bin/python"))
    return [str(path) for path in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pythons", nargs="*", help="interpreters (default: every cached env)")
    parser.add_argument("--rounds", type=int, default=5, help="workers per environment [5]")
    args = parser.parse_args()
    pythons = args.pythons or cached_pythons()
    if not pythons:
        raise SystemExit("no environment given and none cached: run torchcanary once first")
    with tempfile.TemporaryDirectory(prefix="worker-cost-") as scratch:
        root = import_root_for(("torchcanary",), Path(scratch) / "root")
        heading = ("environment", "worker CPU s", "bare import", "ratio", "close s")
        print("{:<48} {:>12} {:>12} {:>6} {:>8}".format(*heading))
        for python in pythons:
            worker_s, bare_s, close_s = [], [], []
            for _ in range(args.rounds):
                cpu, waited = one_worker(python, root)
                worker_s.append(cpu)
                close_s.append(waited)
                bare_s.append(bare_import(python))
            worker, bare = statistics.median(worker_s), statistics.median(bare_s)
            print(
                f"{python:<48} {worker:>12.2f} {bare:>12.2f} {worker / bare:>6.2f} "
                f"{statistics.median(close_s):>8.2f}"
            )


if __name__ == "__main__":
    main()
