"""What shipping work through the fleet costs, against running the same unit locally.

Starts a real local Ray cluster on 127.0.0.1 (one node per profile name), connects the
Ray executor, and runs the same small smoke unit (``tests/fixtures/fleet_smoke.py``: hash
``--rounds`` blocks, send one piece home) ``--units`` times in three ways:

- locally: ``node_side.stream_unit`` in this process, one after another (the floor);
- through the fleet, one at a time: dispatch one unit, wait for its result, repeat (the
  round trip a single unit pays); local and fleet runs alternate;
- through the fleet, all at once: every unit dispatched together, spread over the nodes
  (what a run with many units pays per unit).

It also times the one-off costs (cluster start, connect, profile discovery) and, with
``--node-death``, how long a killed node takes to show up as LOST results.

With ``--section-run`` it measures whole runs instead (``torchcanary run --only claims``
with the probes of ``tests/fixtures/canary_fleet``, in subprocesses as a user types them):

- the same run made locally and through ``--fleet`` on a one-node cluster (the ratio is
  what the fleet costs a run: connect, ship, node-side set-up, streaming home);
- a run on two profiles whose second node is killed once it has stored a result: the time
  from the kill to the run recording that node's unit ``lost`` in the store, then what
  ``--resume`` on a fresh node of that profile redid and what it kept.

Usage: python benchmarks/fleet_overhead.py [--units 20] [--rounds 2000] [--nodes 2]
                                           [--node-death] [--section-run]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchcanary.fleet import node_side
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit

TESTS = Path(__file__).parents[1] / "tests"
FIXTURES = TESTS / "fixtures"
# The local Ray cluster is the tests' (tests/local_cluster.py), and the smoke unit a
# fixture (tests/fixtures/fleet_smoke.py) run here as well as on the nodes.
sys.path[:0] = [str(TESTS), str(FIXTURES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=20, help="units per way of running")
    parser.add_argument("--rounds", type=int, default=2000, help="11 KiB blocks hashed per unit")
    parser.add_argument("--nodes", type=int, default=2, help="nodes in the local cluster")
    parser.add_argument(
        "--node-death", action="store_true", help="also time a killed node's units to LOST"
    )
    parser.add_argument(
        "--section-run", action="store_true", help="whole runs: local vs fleet, kill and resume"
    )
    args = parser.parse_args()
    if args.section_run:
        section_runs()
        return

    from local_cluster import (
        SMOKE,
        local_node_args,
        start_local_cluster,
        stop_local_cluster,
    )
    from torchcanary.fleet.ray_connect import connect

    units = [WorkUnit(f"u{i}", SMOKE, {"rounds": args.rounds}) for i in range(args.units)]
    local_s: list[float] = []

    started = time.perf_counter()
    cluster = start_local_cluster([f"profile-{i}" for i in range(args.nodes)])
    cluster_s = time.perf_counter() - started
    try:
        started = time.perf_counter()
        executor = connect(cluster.address, timeout_s=120)
        connect_s = time.perf_counter() - started
        with executor:
            started = time.perf_counter()
            nodes = executor.discover()
            discover_s = time.perf_counter() - started
            # Warm each node's worker process once: a run pays that once, not per unit.
            _ends(executor, [Assignment(node, units[0]) for node in nodes])
            one_at_a_time_s = []
            for index, unit in enumerate(units):
                # Local and fleet runs alternate, so load from elsewhere hits both alike.
                local_s.append(_local(unit))
                started = time.perf_counter()
                [result] = _ends(executor, [Assignment(nodes[index % len(nodes)], unit)])
                one_at_a_time_s.append(time.perf_counter() - started)
                assert result.status is UnitStatus.OK, result.error
            started = time.perf_counter()
            batch = _ends(
                executor, [Assignment(nodes[i % len(nodes)], unit) for i, unit in enumerate(units)]
            )
            batch_s = time.perf_counter() - started
            assert all(result.status is UnitStatus.OK for result in batch)
            death_s = (
                _node_death(cluster, executor, local_node_args, SMOKE) if args.node_death else None
            )
    finally:
        left = stop_local_cluster(cluster)

    local_median = statistics.median(local_s)
    single_median = statistics.median(one_at_a_time_s)
    print(f"unit: smoke, {args.rounds} rounds; {args.units} units; {len(nodes)} nodes")
    print(
        f"cluster start {cluster_s:.1f} s, connect {connect_s:.1f} s, discover {discover_s:.2f} s"
    )
    print(f"local, per unit (median)              {local_median * 1e3:8.1f} ms")
    print(f"fleet, one at a time, per unit (median){single_median * 1e3:8.1f} ms")
    print(f"fleet, all at once, per unit          {batch_s / args.units * 1e3:8.1f} ms")
    print(f"ratio fleet/local, one at a time      {single_median / local_median:8.2f}")
    print(f"ratio fleet/local, all at once        {batch_s / sum(local_s):8.2f}")
    if death_s is not None:
        print(f"node killed -> its units LOST         {death_s:8.1f} s")
    print(f"Ray processes left behind: {left or 'none'}")


def _ends(executor: Executor, assignments: list[Assignment]) -> list[UnitResult]:
    """Every unit's end, once all have ended (the pieces before are left out)."""
    results = executor.dispatch_streaming(assignments)
    return [result for result in results if result.status is not UnitStatus.PARTIAL]


def _local(unit: WorkUnit) -> float:
    started = time.perf_counter()
    *_, end = map(UnitResult.from_json, node_side.stream_unit(unit.to_json()))
    assert end.status is UnitStatus.OK, end.error
    return time.perf_counter() - started


def _node_death(cluster, executor, local_node_args, smoke) -> float:  # type: ignore[no-untyped-def]
    """Seconds from killing a node mid-unit to the driver holding its LOST result."""
    doomed = cluster.add_node(**local_node_args("doomed"))
    cluster.wait_for_nodes()
    [node] = [node for node in executor.discover() if node.profile.key == "doomed"]
    unit = WorkUnit("doomed", smoke, {"sleep_s": 120})
    results = executor.dispatch_streaming([Assignment(node, unit)])
    time.sleep(3.0)  # let the unit start on the node
    killed = time.perf_counter()
    cluster.remove_node(doomed, allow_graceful=False)
    [result] = [result for result in results if result.status is not UnitStatus.PARTIAL]
    assert result.status is UnitStatus.LOST, result
    return time.perf_counter() - killed


RUN = ("run", "--only", "claims", "--probe-module", "canary_fleet", "--quiet")


def _canary(work: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    # The slow probe sleeps as long here as on the nodes (their raylets get the same).
    env = {**os.environ, "PYTHONPATH": str(FIXTURES), "CANARY_TEST_SLOW_S": "1"}
    command = [sys.executable, "-m", "torchcanary.cli", *RUN, "--store", str(work / "c.db")]
    command += ["--output", str(work / "out"), *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - started, done


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    try:
        with sqlite3.connect(db) as connection:
            return connection.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def section_runs() -> None:
    """Local vs fleet for one claims run; then a node killed mid-run and --resume."""
    from local_cluster import (
        local_node_args,
        start_local_cluster,
        stop_local_cluster,
    )

    on_nodes = {"CANARY_TEST_SLOW_S": "1"}
    cluster = start_local_cluster(["head-box"])
    try:
        solo = cluster.add_node(**local_node_args("solo-box", env_vars=on_nodes))
        cluster.wait_for_nodes()
        probes = ("--probes", "fleet.feature,fleet.slow")
        select = ("--fleet", cluster.address, "--fleet-select", "key=solo-box")
        local_s, fleet_s = [], []
        for _ in range(2):  # alternating, so load from elsewhere hits both alike
            for ways, extra in ((local_s, ()), (fleet_s, select)):
                with tempfile.TemporaryDirectory() as work:
                    seconds, done = _canary(Path(work), *probes, *extra)
                assert done.returncode == 0, done.stderr[-2000:]
                ways.append(seconds)
        print("claims run, 2 probes x 2 environments (subprocess, as typed), 2 runs each:")
        print(f"  local                      {' '.join(f'{s:6.1f}' for s in local_s)} s")
        print(f"  --fleet, one node          {' '.join(f'{s:6.1f}' for s in fleet_s)} s")
        ratio = statistics.median(fleet_s) / statistics.median(local_s)
        print(f"  ratio fleet/local (median) {ratio:7.2f}")
        cluster.remove_node(solo)
        _kill_and_resume(cluster, local_node_args, on_nodes)
    finally:
        left = stop_local_cluster(cluster)
    print(f"Ray processes left behind: {left or 'none'}")


def _kill_and_resume(cluster, local_node_args, on_nodes) -> None:  # type: ignore[no-untyped-def]
    keep = cluster.add_node(**local_node_args("keep-box", env_vars=on_nodes))
    doomed = cluster.add_node(
        **local_node_args("doomed-box", env_vars={**on_nodes, "CANARY_TEST_SLOW_S": "120"})
    )
    cluster.wait_for_nodes()
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        db = work / "c.db"
        env = {**os.environ, "PYTHONPATH": str(FIXTURES)}
        command = [sys.executable, "-m", "torchcanary.cli", *RUN, "--store", str(db)]
        command += ["--output", str(work / "out"), "--probes", "fleet.feature,fleet.slow"]
        command += ["--fleet", cluster.address]
        command += ["--fleet-select", "key=keep-box", "--fleet-select", "key=doomed-box"]
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        doomed_rows = "SELECT count(*) FROM probe_results WHERE profile = 'doomed-box'"
        while run.poll() is None and not (_rows(db, doomed_rows) or [(0,)])[0][0]:
            time.sleep(0.1)
        cluster.remove_node(doomed, allow_graceful=False)
        killed = time.perf_counter()
        lost_row = (
            "SELECT count(*) FROM section_results WHERE section = 'fleet' AND verdict = 'lost'"
        )
        while not (_rows(db, lost_row) or [(0,)])[0][0] and run.poll() is None:
            time.sleep(0.05)
        noticed_s = time.perf_counter() - killed
        run.wait(timeout=600)
        before = set(_rows(db, "SELECT profile, env_role, probe_id, started_at FROM probe_results"))
        cluster.add_node(**local_node_args("doomed-box", env_vars=on_nodes))
        cluster.wait_for_nodes()
        resume_s, resumed = _canary(work, "--resume")
        after = set(_rows(db, "SELECT profile, env_role, probe_id, started_at FROM probe_results"))
    print("node killed mid-run (2 profiles, 2 probes x 2 environments each):")
    print(f"  first run exit code        {run.returncode}")
    print(f"  kill -> unit stored lost   {noticed_s:7.2f} s")
    print(f"  results kept from the run  {len(before)} of 8")
    print(f"  --resume: exit {resumed.returncode}, {resume_s:.1f} s, redid {len(after - before)}")
    print(f"  kept untouched             {len(before & after)} (started_at unchanged)")
    cluster.remove_node(keep)


if __name__ == "__main__":
    main()
