"""Slurm against Ray on this machine: time to a unit's first result, cost against a local
run, and how long each engine takes to notice a lost node.

Starts both test clusters before any clock runs (``tests/slurm_cluster.py``: slurmctld and
two slurmd; ``tests/local_cluster.py``: a two-node Ray cluster on 127.0.0.1) and sends the
same smoke unit (``tests/fixtures/fleet_smoke.py``: hash ``--rounds`` blocks, send two
pieces home a second apart) ``--units`` times, one at a time, through each engine:

- submit -> first piece and submit -> end (median and range); the same unit run in this
  process (``node_side.stream_unit``) is the local floor, and the ratio is against it;
- with ``--section-run``: one whole ``torchcanary run --only claims`` (the
  ``canary_fleet`` probes, as the fleet tests use) made locally, on ``--fleet slurm`` and on
  ``--fleet`` with the Ray head's address (one node each, same machine): wall seconds and
  the ratio to local;
- node loss, ``--strikes`` times each: on Slurm, a node killed outright (its slurmd and its
  jobs: power lost), ``scontrol update State=DOWN``, and ``scancel``; on Ray, a node removed
  without grace. Each figure is the seconds from the strike to the unit's LOST result.

The load average is printed with each figure: on a shared machine it explains spread.
Needs root, Slurm (``make slurm``) and Ray (``.[dev]``).

Usage: python benchmarks/fleet_engines.py [--units 5] [--rounds 200] [--strikes 1]
                                          [--section-run]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchcanary.fleet import node_side
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit

TESTS = Path(__file__).parents[1] / "tests"
FIXTURES = TESTS / "fixtures"
# The clusters are the tests' own; the smoke unit and the probes are fixtures.
sys.path[:0] = [str(TESTS), str(FIXTURES)]
PROBES = "fleet.feature,fleet.slow"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=5, help="smoke units per engine")
    parser.add_argument("--rounds", type=int, default=200, help="11 KiB blocks hashed per unit")
    parser.add_argument("--strikes", type=int, default=1, help="node losses of each kind")
    parser.add_argument(
        "--section-run", action="store_true", help="also a whole claims run: local, Slurm, Ray"
    )
    args = parser.parse_args()

    from local_cluster import local_node_args, start_local_cluster, stop_local_cluster
    from slurm_cluster import SlurmCluster, SlurmNodeSpec
    from torchcanary.fleet.connect import connect_fleet

    work = Path(tempfile.mkdtemp(prefix="fleet-engines-"))
    os.environ["CANARY_TEST_SLOW_S"] = "1"  # the Ray nodes' slow probe (Slurm's: its prolog)
    slow = (("CANARY_TEST_SLOW_S", "1"),)
    slurm = SlurmCluster([SlurmNodeSpec("box-a", env=slow), SlurmNodeSpec("box-b", env=slow)])
    os.environ["SLURM_CONF"] = str(slurm.conf)
    ray_cluster = start_local_cluster(["head", "box-a"], head_cpus=0)
    engines: dict[str, Executor] = {}
    try:
        engines["slurm"] = connect_fleet("slurm", fleet_dir=work / "slurm-dir")
        engines["ray"] = connect_fleet(ray_cluster.address, timeout_s=60)
        unit = WorkUnit(
            "smoke", "fleet_smoke:smoke", {"rounds": args.rounds, "pieces": 2, "gap_s": 1}
        )
        local = [_local(unit) for _ in range(args.units)]
        print(f"local (this process): end {_spread(local)}  [{_load()}]")
        for name, executor in engines.items():
            node = next(n for n in executor.discover() if n.profile.key == "box-a")
            firsts, ends = zip(
                *(_timed(executor, node, unit) for _ in range(args.units)), strict=True
            )
            ratio = statistics.median(ends) / statistics.median(local)
            print(
                f"{name}: submit->first piece {_spread(firsts)}; submit->end {_spread(ends)}; "
                f"{ratio:.2f}x local  [{_load()}]"
            )
        if args.section_run:
            _section_runs(work, ray_cluster.address)
        for _ in range(args.strikes):
            for how in ("power lost", "State=DOWN", "scancel"):
                seconds = _slurm_loss(engines["slurm"], slurm, how)
                print(f"slurm {how}: lost after {seconds:.1f}s  [{_load()}]")
            seconds = _ray_loss(engines["ray"], ray_cluster, local_node_args)
            print(f"ray node removed: lost after {seconds:.1f}s  [{_load()}]")
        print("slurm: SlurmdTimeout=10 here (Slurm's default 300); ray: health checks 1 s x 5")
    finally:
        for executor in engines.values():
            executor.close()
        left = slurm.destroy() + stop_local_cluster(ray_cluster)
        subprocess.run(["rm", "-rf", str(work)], check=False)
        if left:
            print(f"processes left: {left}")


def _load() -> str:
    return "load " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def _spread(values: Any) -> str:
    values = list(values)
    return f"median {statistics.median(values):.2f}s (range {min(values):.2f}-{max(values):.2f})"


def _local(unit: WorkUnit) -> float:
    started = time.perf_counter()
    for _ in node_side.stream_unit(unit.to_json()):
        pass
    return time.perf_counter() - started


def _timed(executor: Executor, node: Any, unit: WorkUnit) -> tuple[float, float]:
    """Seconds from submitting one unit to its first piece, and to its end."""
    started = time.perf_counter()
    first = 0.0
    for result in executor.dispatch_streaming([Assignment(node, unit)]):
        if result.status is UnitStatus.PARTIAL and not first:
            first = time.perf_counter() - started
        if result.status is not UnitStatus.PARTIAL:
            assert result.status is UnitStatus.OK, result.error
    return first, time.perf_counter() - started


def _lost_after(executor: Executor, node: Any, strike: Callable[[], None]) -> float:
    """Seconds from ``strike`` (once the unit has sent a piece) to the unit's LOST end."""
    unit = WorkUnit("doomed", "fleet_smoke:smoke", {"pieces": 120, "gap_s": 1})
    results = executor.dispatch_streaming([Assignment(node, unit)])
    next(results)
    struck = time.perf_counter()
    strike()
    end: UnitResult = next(r for r in results if r.status is not UnitStatus.PARTIAL)
    assert end.status is UnitStatus.LOST, end
    return time.perf_counter() - struck


def _slurm_loss(executor: Executor, cluster: Any, how: str) -> float:
    node = next(n for n in executor.discover() if n.node_id == "box-b")

    def strike() -> None:
        if how == "power lost":
            cluster.kill_node("box-b")
        elif how == "State=DOWN":
            cluster.down("box-b")
        else:
            [job] = cluster.run("squeue", "-h", "-w", "box-b", "-o", "%i").split()
            cluster.run("scancel", job)

    seconds = _lost_after(executor, node, strike)
    if how == "power lost":
        cluster.start_node("box-b")
    elif how == "State=DOWN":
        cluster.run("scontrol", "update", "NodeName=box-b", "State=RESUME")
        cluster.wait_idle(["box-b"])
    return seconds


def _ray_loss(executor: Executor, cluster: Any, local_node_args: Any) -> float:
    extra = cluster.add_node(**local_node_args("box-b"))
    cluster.wait_for_nodes()
    node = next(n for n in executor.discover() if n.profile.key == "box-b")
    return _lost_after(executor, node, lambda: cluster.remove_node(extra, allow_graceful=False))


def _section_runs(work: Path, ray_address: str) -> None:
    """One claims run made locally, on Slurm's box-a and on Ray's box-a: wall seconds."""
    from cli_helpers import canary_command, canary_env

    def run(name: str, *fleet: str) -> float:
        folder = work / name
        folder.mkdir()
        command = canary_command(
            "run", "--only", "claims", "--probe-module", "canary_fleet", "--probes", PROBES,
            "--store", str(folder / "canary.db"), "--output", str(folder / "out"), *fleet,
        )  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(
            command, cwd=folder, env=canary_env(CANARY_TEST_SLOW_S="1"), capture_output=True,
            text=True, timeout=900,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        if done.returncode not in (0, 1):
            raise SystemExit(f"{name} run failed ({done.returncode}): {done.stderr[-1500:]}")
        return seconds

    select = ("--fleet-select", "key=box-a")
    local = run("local")
    slurm = run("slurm", "--fleet", "slurm", "--fleet-dir", str(work / "runs-dir"), *select)
    ray = run("ray", "--fleet", ray_address, *select)
    print(
        f"claims run: local {local:.1f}s; slurm {slurm:.1f}s ({slurm / local:.2f}x); "
        f"ray {ray:.1f}s ({ray / local:.2f}x)  [{_load()}]"
    )


if __name__ == "__main__":
    main()
