"""Work across nodes: one rank on each of two real Ray nodes; a bench, a rank and a node killed.

The cluster is this module's own (a head that holds no work and three one-CPU nodes, all on
127.0.0.1), because the node-kill drills kill two of its nodes. Only the candidate
environment is drilled, to keep the test near a minute; ``drill --fleet --nodes`` runs both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_canary_here
from env_specs import BASELINE_SPEC, CANDIDATE_SPEC
from fleet_helpers import candidate_node_drills, drill_processes_left, require_ray
from local_cluster import (
    local_node_args,
    start_local_cluster,
    stop_local_cluster,
)
from torchcanary.drill.drill_host import why_not_strikable
from torchcanary.node_kit.rank_host import UNPRIVILEGED_VARIABLE
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.view import load_run_view
from torchcanary.runner import execute
from torchcanary.store.sqlite import SqliteStore

DRILLS = {
    "faults": ["kill:restart-unshared", "node-kill:timeout", "net-down:timeout"],
    "steps": 16,
    "at_step": 6,
    "ckpt_every": 3,
    "timeout_s": 10.0,
    "drill_timeout_s": 90.0,
}
# Two ops at one size, two groups, no A/A control: real figures, near half a minute.
NODE_BENCH = {
    "families": ["collectives"],
    "collectives": {"ops": ["all_reduce", "all_gather"], "bytes": [2**20]},
    "groups": 2,
    "aa_control": False,
    "group_budget_s": 0.2,
}
# The unshared store: torchrun's shared one fails some restarts on gloo (pytorch#135712).
RESTART_AFTER_NODE_KILL = "node-kill:restart-unshared"
BENCH_KEYS = ("collective/all_reduce/1MiB/gloox2nodes", "collective/all_gather/1MiB/gloox2nodes")


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        (
            "drill",
            ["--nodes", "2"],
            "--nodes 2 places ranks on the fleet's nodes: add --fleet ADDRESS",
        ),
        (
            "bench",
            ["--nodes", "2"],
            "--nodes 2 places ranks on the fleet's nodes: add --fleet ADDRESS",
        ),
        ("drill", ["--nodes", "1", "--fleet", "127.0.0.1:1"], "a drill across nodes needs"),
        ("bench", ["--nodes", "1", "--fleet", "127.0.0.1:1"], "a bench across nodes needs"),
        ("drill", ["--nodes", "2", "--fleet", "127.0.0.1:1"], "cannot reach the Ray cluster at"),
    ],
)
def test_work_across_nodes_asked_wrongly_is_one_line_and_exit_2_with_nothing_written(
    tmp_path: Path, command: str, flags: list[str], said: str
) -> None:
    argv = [command, *flags, "--output", "out"]
    if "cannot reach" in said:  # a connect that gave up leaves Ray's attempt in its thread
        done = subprocess.run(
            [sys.executable, "-m", "torchcanary.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    else:
        done = run_canary_here(*argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def drill_cluster(candidate_env):
    """A head that holds no work and three one-CPU nodes; no Ray process outlives it.

    The two nodes act as if torchcanary ran there without root (a raylet setting), so a
    fault that needs privileges is refused there before it is tried.
    """
    require_ray()
    cluster = start_local_cluster(["drill-head"], head_cpus=0)
    try:
        for name in ("drill-a", "drill-b", "drill-c"):
            cluster.add_node(**local_node_args(name, 1, {UNPRIVILEGED_VARIABLE: "1"}))
        cluster.wait_for_nodes()
        yield cluster
    finally:
        assert stop_local_cluster(cluster) == []


def test_a_fault_that_needs_root_is_refused_on_a_node_without_it_before_it_is_tried() -> None:
    without_root = {"root": False, "ip": True, "tc": True}
    with_root = {"root": True, "ip": False, "tc": True}
    assert why_not_strikable("net-down", without_root, False).startswith("needs root")
    assert why_not_strikable("net-slow", without_root, False).startswith("needs root")
    assert "needs the 'ip' command" in why_not_strikable("net-down", with_root, False)
    assert why_not_strikable("net-slow", with_root, True).startswith(
        "no network namespace of its own"
    )
    assert why_not_strikable("kill", without_root, True) == ""


@pytest.mark.ray
def test_bench_across_two_nodes_stores_judged_collectives_with_busbw_per_profile(
    drill_cluster, tmp_path: Path
) -> None:
    # Before the drill test: that one kills a node.
    from torchcanary.bench.across_nodes import NodeBench
    from torchcanary.bench.result import BenchMeasured, from_rows
    from torchcanary.fleet.across_nodes import NodesVenue
    from torchcanary.fleet.ray_connect import connect
    from torchcanary.store.history import HistoryFilter, history

    plan = RunPlan(
        baseline=BASELINE_SPEC,
        candidate=CANDIDATE_SPEC,
        sections=("bench",),
        settings={"bench": dict(NODE_BENCH)},
    )
    with (
        SqliteStore(tmp_path / "canary.db") as store,
        connect(drill_cluster.address, timeout_s=60) as fleet,
    ):
        venue = NodesVenue(NodeBench(fleet, drill_cluster.address, 2, mixed=True))
        outcome = execute(plan, store, tmp_path / "out", Progress(quiet=True), venue)
        view = load_run_view(store, outcome.run_id)
        ((profile, node),) = store.run_profiles(outcome.run_id).items()
        scoped = store.scoped(node, profile)
        samples = {key: scoped.measurements(outcome.run_id, key) for key in BENCH_KEYS}
        followed = history(store, BENCH_KEYS[0], "bench", HistoryFilter(profile=profile))
    # Two nodes labelled with different profiles (drill-a, -b or -c): named as a mix of
    # them, never filed under a joined key.
    assert list(view.profiles) == [profile] and profile.startswith("mixed:")
    mixed = profile.removeprefix("mixed:").split(",")
    assert len(set(mixed)) == 2 and set(mixed) <= {"drill-a", "drill-b", "drill-c"}
    records = {r.key: r for r in from_rows(view.profiles[profile].sections["bench"])}
    assert set(records) == set(BENCH_KEYS)
    for record in records.values():
        assert isinstance(record, BenchMeasured), record
        assert record.nodes == 2 and record.spec["world_size"] == 2
        assert record.ratio is not None and record.ci_low <= record.ratio <= record.ci_high
        # busbw by nccl-tests: n = 2 makes all_reduce's 2(n-1)/n 1, all_gather's (n-1)/n 1/2.
        factor = 1.0 if record.spec["op"] == "all_reduce" else 0.5
        for role in ("baseline", "candidate"):
            bandwidth = (record.collective_bandwidth or {})[role]
            median = record.sides[role]["median_s"]
            assert bandwidth["algbw_bytes_per_s"] == pytest.approx(2**20 / median)
            assert bandwidth["busbw_bytes_per_s"] == pytest.approx(
                bandwidth["algbw_bytes_per_s"] * factor
            )
    # Raw samples of both sides stored, and the profile in every report format.
    for series in samples.values():
        assert series[("baseline", "samples_s")] and series[("candidate", "samples_s")]
    assert [(e.run_id, e.profile) for e in followed] == [(outcome.run_id, profile)]
    results = json.loads(outcome.outputs["json"].read_text())
    assert "collective/all_reduce/1MiB/gloox2nodes" in json.dumps(
        results["fleet"]["profiles"][profile]
    )
    assert "gloox2nodes" in outcome.outputs["junit"].read_text()
    assert profile in outcome.outputs["markdown"].read_text()


@pytest.mark.ray
def test_bench_on_more_nodes_than_the_cluster_has_is_one_line_and_exit_2(
    drill_cluster, tmp_path: Path
) -> None:
    flags = ["--fleet", drill_cluster.address, "--nodes", "4", "--output", "out"]
    done = subprocess.run(
        [sys.executable, "-m", "torchcanary.cli", "bench", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "the Ray cluster has 3 live nodes with a CPU" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ray
def test_a_job_on_three_nodes_restarts_on_the_two_left_when_a_node_dies(
    drill_cluster, tmp_path: Path
) -> None:
    # Before the two-node drill test, which needs two of the nodes this one leaves alive.
    drills = {**DRILLS, "faults": [RESTART_AFTER_NODE_KILL]}
    with candidate_node_drills(drill_cluster.address, drills, 3, tmp_path) as (_, rows, placed):
        row = rows[RESTART_AFTER_NODE_KILL]
    payload = row.payload
    assert row.verdict == "passed", payload["reason"]
    assert "on 2 of 3 nodes" in payload["reason"]
    # Node 1 died for good; nodes 0 and 2 restarted from the shared checkpoint, and every
    # step matches the fault-free run on three nodes.
    assert payload["nodes_gone"] == [1] and payload["finished_ranks"] == 2
    assert payload["restarts"] >= 1 and payload["step_check"]["first_difference"] is None
    assert payload["detect_s"] is not None and payload["resume_s"] is not None
    assert payload["steps_lost"] is not None
    assert drill_processes_left(placed, range(3)) == []


@pytest.mark.ray
def test_ranks_on_two_nodes_recover_from_a_rank_kill_and_detect_a_node_kill(
    drill_cluster, tmp_path: Path
) -> None:
    import ray

    with candidate_node_drills(drill_cluster.address, dict(DRILLS), 2, tmp_path) as run:
        outcome, rows, placed = run
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    kill, node_kill = rows["kill:restart-unshared"], rows["node-kill:timeout"]
    net_down = rows["net-down:timeout"]
    assert net_down.verdict == "not-checkable"
    assert net_down.payload["reason"].startswith("not checkable on ")
    assert net_down.payload["reason"].endswith(
        "needs root (ip route / tc change the node's network)"
    )
    # One rank on each of two distinct nodes.
    assert len({node["node_id"] for node in kill.payload["nodes"]}) == 2
    assert kill.verdict == "passed", kill.payload["reason"]
    assert kill.payload["restarts"] >= 1 and kill.payload["steps_lost"] is not None
    assert kill.payload["detect_s"] is not None and kill.payload["resume_s"] is not None
    assert node_kill.verdict == "passed", node_kill.payload["reason"]
    assert node_kill.payload["nodes_gone"] == [1]
    assert node_kill.payload["detect_s"] < DRILLS["timeout_s"] + 10
    assert node_kill.payload["ray_noticed_s"] is not None
    # The killed node is dead to Ray, and no process of the drills is left on any node.
    assert node_kill.payload["nodes"][1]["node_id"] not in alive
    assert drill_processes_left(placed, range(2)) == []
    assert outcome.outputs and all(path.exists() for path in outcome.outputs.values())


def test_a_node_kill_on_one_machine_is_not_checkable_and_all_leaves_it_out(tmp_path: Path) -> None:
    from torchcanary.drill import section
    from torchcanary.drill.catalog import DrillSpec
    from torchcanary.drill.drill import DrillRunner

    outcome = DrillRunner(sys.executable, tmp_path, tmp_path).run(DrillSpec("node-kill", "timeout"))
    assert outcome.verdict.value == "not-checkable"
    assert "drill --fleet ADDR --nodes 2" in outcome.payload["reason"]
    assert list(tmp_path.iterdir()) == []  # nothing was started
    assert not any(
        name.startswith("node-kill") for name in section.parse_settings({"faults": "all"})["faults"]
    )


def test_node_kills_are_drilled_last_whatever_order_they_were_given_in() -> None:
    from torchcanary.drill.across_nodes import in_node_order
    from torchcanary.drill.settings import parse_settings

    faults = ["node-kill:timeout", "kill:restart-unshared", "node-kill:replace", "hang:timeout"]
    specs = parse_settings({"faults": faults}).specs()
    assert [spec.key for spec in in_node_order(specs)] == [
        "kill:restart-unshared",
        "hang:timeout",
        "node-kill:timeout",
        "node-kill:replace",
    ]
