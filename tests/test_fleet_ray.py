"""The fleet on a real local Ray cluster: three nodes on 127.0.0.1, one profile label each.

One cluster serves the whole session (see ``ray_cluster`` in conftest.py); the test that
kills a node adds its own node first, so it runs last and spoils nothing for the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_helpers import FLEET_PROFILES, unit_ends, without_devices
from local_cluster import SMOKE, local_node_args, node_pids, wait_gone
from torchcanary.fleet.executor import Assignment
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit
from torchcanary.hardware_profile import FleetNode, NodeSelection

pytestmark = pytest.mark.ray


def by_profile(nodes: list[FleetNode]) -> dict[str, FleetNode]:
    return {node.profile.key: node for node in nodes}


def test_every_node_reports_its_hardware_and_nodes_group_by_their_profile_label(fleet) -> None:
    nodes = fleet.discover()
    assert sorted(by_profile(nodes)) == sorted(FLEET_PROFILES)
    for node in nodes:
        # Read on the node itself: the facts are this machine's.
        assert node.profile.cpu_cores == os.cpu_count()
        assert node.profile.os and node.profile.arch
    assert len(NodeSelection.parse().choose(nodes)) == 3
    chosen = NodeSelection.parse("all", ["key=beta-box"]).choose(nodes)
    assert [node.profile.key for node in chosen] == ["beta-box"]


def raylet_pids(ray_cluster) -> dict[str, int]:
    """Each node's raylet process, by node id: a Ray worker's parent."""
    return {
        node.node_id: node.all_processes["raylet"][0].process.pid
        for node in [ray_cluster.head_node, *ray_cluster.worker_nodes]
    }


@pytest.mark.parametrize("how", ["ray-client", "auto"])
def test_a_driver_connects_by_ray_client_address_or_by_auto_with_ray_address(
    ray_cluster, how: str
) -> None:
    # A fresh process: one process holds one Ray connection, and the session's is taken.
    address = ray_cluster.client_address if how == "ray-client" else "auto"
    code = (
        "from torchcanary.fleet.ray_connect import connect\n"
        f"with connect({address!r}, timeout_s=60) as fleet:\n"
        "    print(sorted(node.profile.key for node in fleet.discover()))\n"
    )
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == str(sorted(FLEET_PROFILES))


def test_each_result_streams_back_as_it_finishes_tagged_with_its_node_and_profile(
    ray_cluster, fleet
) -> None:
    nodes = by_profile(fleet.discover())
    # The slow unit is sent first; the fast ones must not wait for it.
    assignments = [
        Assignment(nodes["alpha-box"], WorkUnit("slow", SMOKE, {"sleep_s": 4})),
        Assignment(nodes["beta-box"], WorkUnit("fast-beta", SMOKE, {"rounds": 10})),
        Assignment(nodes["head-box"], WorkUnit("fast-head", SMOKE, {"rounds": 10})),
    ]
    arrived: list[str] = []
    results = {}
    for end, [piece] in unit_ends(fleet, assignments):
        arrived.append(end.unit_id)
        results[end.unit_id] = end, piece
    assert arrived[-1] == "slow"
    assert set(arrived[:2]) == {"fast-beta", "fast-head"}
    for assignment in assignments:
        end, piece = results[assignment.unit.unit_id]
        assert end.status is UnitStatus.OK, end.error
        assert (end.node_id, end.profile_key) == (
            assignment.node.node_id,
            assignment.node.profile.key,
        )
        # The node that ran it is the one assigned: the worker's parent is that node's raylet.
        assert piece["parent_pid"] == raylet_pids(ray_cluster)[end.node_id]


def test_a_unit_whose_work_raises_is_failed_and_the_others_go_on(fleet) -> None:
    nodes = by_profile(fleet.discover())
    results = {
        end.unit_id: end
        for end, _ in unit_ends(
            fleet,
            [
                Assignment(nodes["alpha-box"], WorkUnit("bad", SMOKE, {"fail": "boom"})),
                Assignment(nodes["alpha-box"], WorkUnit("good", SMOKE, {})),
            ],
        )
    }
    assert results["bad"].status is UnitStatus.FAILED
    assert results["bad"].error == "RuntimeError: boom"
    assert results["good"].status is UnitStatus.OK


def test_a_streaming_unit_sends_each_piece_home_before_its_end(fleet) -> None:
    nodes = by_profile(fleet.discover())
    assignments = [
        Assignment(nodes["alpha-box"], WorkUnit("three", SMOKE, {"pieces": 3})),
        Assignment(
            nodes["beta-box"], WorkUnit("breaks", SMOKE, {"pieces": 2, "fail": "disk full"})
        ),
    ]
    seen: dict[str, list[UnitResult]] = {"three": [], "breaks": []}
    for result in fleet.dispatch_streaming(assignments):
        seen[result.unit_id].append(result)
    for unit_id, pieces, end in (("three", 3, UnitStatus.OK), ("breaks", 2, UnitStatus.FAILED)):
        results = without_devices(seen[unit_id])
        assert [r.status for r in results] == [UnitStatus.PARTIAL] * pieces + [end]
        assert [r.output["piece"] for r in results[:-1]] == list(range(pieces))  # type: ignore[index]
        assert {r.profile_key for r in results} == {
            "alpha-box" if unit_id == "three" else "beta-box"
        }
    assert seen["breaks"][-1].error == "RuntimeError: disk full"


def test_no_password_or_token_reaches_a_node(fleet) -> None:
    nodes = by_profile(fleet.discover())
    unit = WorkUnit(
        "secrets",
        SMOKE,
        payload={
            "echo": {"store": "postgresql://canary:hunter2@db/runs", "api_token": "t0k"},
            "env": ["HF_TOKEN", "CANARY_STORE", "CANARY_MODE"],
        },
        env={
            "HF_TOKEN": "hf_secret",
            "CANARY_STORE": "postgresql://canary:hunter2@db/runs",
            "CANARY_MODE": "fleet",
        },
    )
    piece, end = without_devices(
        list(fleet.dispatch_streaming([Assignment(nodes["beta-box"], unit)]))
    )
    assert end.status is UnitStatus.OK, end.error
    assert piece.output == {
        **(piece.output or {}),
        "echo": {"store": "postgresql://canary@db/runs"},
        "env": [
            ["HF_TOKEN", None],
            ["CANARY_STORE", "postgresql://canary@db/runs"],
            ["CANARY_MODE", "fleet"],
        ],
    }
    assert "hunter2" not in piece.to_json() and "hf_secret" not in piece.to_json()


@pytest.mark.timeout(180)  # before the fix the driver waited for ever
def test_a_result_the_driver_cannot_read_ends_its_unit_as_an_error_and_the_others_go_on(
    fleet,
) -> None:
    """Issue 28 item 7: a stream that breaks with a non-Ray error reaches the consumer as
    its unit's end (FAILED, with the cause) instead of dying in the reader thread."""
    nodes = by_profile(fleet.discover())
    # The driver strips URLs from every result before keeping it, and a malformed one (an
    # IPv6 host without its closing bracket) makes that raise a plain ValueError there. As a
    # mapping key it leaves the driver unstripped; the node's error message quotes it.
    malformed = {"http://[fe80::1": 1}
    unreadable = "error: the unit's result could not be read on the driver: ValueError: "
    streamed: dict[str, list[UnitResult]] = {"unreadable": [], "pieces": []}
    for result in fleet.dispatch_streaming(
        [
            Assignment(
                nodes["alpha-box"],
                WorkUnit("unreadable", SMOKE, {"pieces": 1, "fail": malformed}),
            ),
            Assignment(nodes["beta-box"], WorkUnit("pieces", SMOKE, {"pieces": 2})),
        ]
    ):
        streamed[result.unit_id].append(result)
    piece, broken = without_devices(streamed["unreadable"])
    assert (piece.status, broken.status) == (UnitStatus.PARTIAL, UnitStatus.FAILED)
    assert broken.profile_key == "alpha-box"
    assert broken.error == unreadable + "Invalid IPv6 URL"
    assert [r.status for r in without_devices(streamed["pieces"])] == [UnitStatus.PARTIAL] * 2 + [
        UnitStatus.OK
    ]


def _running_unit_pid(raylet_pid: int, timeout_s: float = 60.0) -> int:
    """The Ray worker of ``raylet_pid`` that runs a unit now (Ray titles it
    ``ray::stream_unit``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                title = (entry / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            if parent == raylet_pid and title.startswith(b"ray::stream_unit"):
                return int(entry.name)
        time.sleep(0.2)
    raise AssertionError(f"no unit started under raylet {raylet_pid} within {timeout_s:.0f}s")


def test_a_worker_that_crashes_on_a_live_node_fails_its_unit_with_the_cause(
    ray_cluster, fleet
) -> None:
    """Issue 28 item 7: a crashed worker on a healthy node is not "node went away": Ray's
    node table is asked, and the unit is FAILED with the crash as its cause."""
    nodes = by_profile(fleet.discover())
    alpha = nodes["alpha-box"]
    results = fleet.dispatch_streaming(
        [Assignment(alpha, WorkUnit("crashing", SMOKE, {"sleep_s": 60}))]
    )
    os.kill(_running_unit_pid(raylet_pids(ray_cluster)[alpha.node_id]), signal.SIGKILL)
    [crashed] = without_devices(list(results))
    assert crashed.status is UnitStatus.FAILED
    assert (crashed.node_id, crashed.profile_key) == (alpha.node_id, "alpha-box")
    assert (crashed.error or "").startswith(
        f"worker crashed on a live node ({alpha.node_id[:12]}): WorkerCrashedError: "
    )
    assert fleet.node_alive(alpha.node_id)
    # The node runs the next unit as before.
    [(after, _)] = unit_ends(fleet, [Assignment(alpha, WorkUnit("after", SMOKE, {}))])
    assert after.status is UnitStatus.OK, after.error


def test_a_node_killed_mid_run_loses_only_its_unfinished_units(ray_cluster, fleet) -> None:
    doomed = ray_cluster.add_node(**local_node_args("doomed-box"))
    ray_cluster.wait_for_nodes()
    doomed_pids = node_pids(doomed)
    nodes = by_profile(fleet.discover())
    # The doomed node holds one CPU: one unit runs there, the other waits its turn.
    assignments = [
        Assignment(nodes["doomed-box"], WorkUnit("doomed-running", SMOKE, {"sleep_s": 60})),
        Assignment(nodes["doomed-box"], WorkUnit("doomed-queued", SMOKE, {"sleep_s": 60})),
        Assignment(nodes["alpha-box"], WorkUnit("survivor", SMOKE, {"sleep_s": 1})),
    ]
    results = {}
    for result, _ in unit_ends(fleet, assignments):
        results[result.unit_id] = result
        if result.unit_id == "survivor":
            ray_cluster.remove_node(doomed, allow_graceful=False)
    assert set(results) == {"doomed-running", "doomed-queued", "survivor"}
    assert results["survivor"].status is UnitStatus.OK
    for unit_id in ("doomed-running", "doomed-queued"):
        assert results[unit_id].status is UnitStatus.LOST
        assert results[unit_id].profile_key == "doomed-box"
        assert "went away before the unit finished" in (results[unit_id].error or "")
    assert wait_gone(doomed_pids) == []
    assert "doomed-box" not in by_profile(fleet.discover())
    # Work sent to the node after its death (a stale node list) is lost too, not stuck.
    [(late, _)] = unit_ends(fleet, [Assignment(nodes["doomed-box"], WorkUnit("late", SMOKE))])
    assert (late.unit_id, late.status) == ("late", UnitStatus.LOST)
