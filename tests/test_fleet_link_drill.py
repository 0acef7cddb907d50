"""The link between Ray nodes cut and slowed for real: every node in a namespace of its own.

The module's cluster (``start_bridged_cluster``) runs each Ray node, the head too, in its own
network namespace on a private bridge, so the drill's two ranks talk over veths and the
struck node can cut or slow its own link, as on separate machines. Only the candidate
environment is drilled, to keep the module near a minute and a half.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet_helpers import (
    candidate_node_drills,
    collective_bench_plan,
    drill_processes_left,
    require_ray,
)
from torchcanary.drill.netns import why_unavailable
from torchcanary.node_kit.node_link import HOLDER_NAME
from torchcanary.progress import Progress
from torchcanary.report.view import load_run_view
from torchcanary.runner import execute
from torchcanary.store.sqlite import SqliteStore

pytestmark = [pytest.mark.ray, pytest.mark.netns]

LINK_DRILLS = {
    # The node kill last: it takes node 1 for good, and the spare node takes its place.
    "faults": ["net-down:timeout", "net-slow:none", "node-kill:replace"],
    "steps": 12,
    "at_step": 5,
    "ckpt_every": 3,
    "timeout_s": 5.0,
    "net_rate": "8mbit",
    "drill_timeout_s": 90.0,
}


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30).stdout


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # exited meanwhile
        return ""


@pytest.fixture(scope="module")
def bridged_cluster(candidate_env):
    """A head with no CPU and three one-CPU nodes (two for the drill, one spare), each in
    its own namespace; nothing of it (process, namespace, veth, bridge) outlives the module."""
    require_ray()
    why = why_unavailable(need_tc=True)
    if why:
        pytest.skip(f"not checked: {why}")
    from local_cluster import start_bridged_cluster

    cluster = start_bridged_cluster(["link-a", "link-b", "link-spare"])
    network = cluster.network
    made = [*network.namespaces, *(network.host_veth(i) for i in range(network.ranks))]
    try:
        yield cluster
    finally:
        assert cluster.stop() == []
        assert not set(made) & set(_ip("netns", "list").split())
        assert not [name for name in made if _ip("link", "show", "dev", name)]


def test_collectives_across_two_namespaced_nodes_bind_gloo_to_the_bridge(
    bridged_cluster, tmp_path: Path
) -> None:
    """Before the drills: their node kill takes a node for good. Off loopback, a rank's
    gloo must bind to the address the other nodes reach it at, or the group never forms."""
    from torchcanary.bench.across_nodes import NodeBench
    from torchcanary.bench.result import BenchMeasured, from_rows
    from torchcanary.fleet.across_nodes import NodesVenue
    from torchcanary.fleet.ray_connect import connect

    plan = collective_bench_plan(group_budget_s=0.1)
    with (
        SqliteStore(tmp_path / "canary.db") as store,
        connect(bridged_cluster.address, timeout_s=60) as fleet,
    ):
        # Each node is labelled a profile of its own: a mix, named as such.
        venue = NodesVenue(NodeBench(fleet, bridged_cluster.address, 2, mixed=True))
        outcome = execute(plan, store, tmp_path / "out", Progress(quiet=True), venue)
        view = load_run_view(store, outcome.run_id)
    (scoped,) = view.profiles.values()
    (record,) = from_rows(scoped.sections["bench"])
    assert record.key == "collective/all_reduce/64KiB/gloox2nodes"
    assert isinstance(record, BenchMeasured), record
    assert set(record.sides) == {"baseline", "candidate"}
    assert all(side["n"] > 0 for side in record.sides.values())


def test_a_cut_and_a_slowed_link_between_two_nodes_are_struck_on_the_node_and_undone(
    bridged_cluster, tmp_path: Path
) -> None:
    with candidate_node_drills(bridged_cluster.address, dict(LINK_DRILLS), 2, tmp_path) as run:
        _, rows, placed = run
    cut, slow, replaced = rows["net-down:timeout"], rows["net-slow:none"], rows["node-kill:replace"]
    # The cut node's rank and its peer both stall; the peer's collective times out.
    assert cut.verdict == "passed", cut.payload["reason"]
    assert cut.payload["reason"].startswith("surfaced across nodes as ")
    assert cut.payload["struck_node"] == 1 and "cut (blackhole routes)" in cut.payload["injected"]
    assert cut.payload["detect_s"] is not None
    # The slowed node's job runs on to the end, every step equal to the fault-free run.
    assert slow.verdict == "passed", slow.payload["reason"]
    assert slow.payload["reason"].startswith("ran on through the fault across 2 nodes")
    assert "limited to 8mbit (tc tbf)" in slow.payload["injected"]
    assert slow.payload["step_check"]["first_difference"] is None
    # Node 1 died; the spare node joined the job, which finished on two nodes again with
    # every step equal to the fault-free run.
    assert replaced.verdict == "passed", replaced.payload["reason"]
    assert "node 1 replaced by a fresh node" in replaced.payload["reason"]
    assert replaced.payload["nodes_gone"] == [1] and replaced.payload["replaced_by"] == 2
    assert replaced.payload["finished_ranks"] == 2 and replaced.payload["restarts"] >= 1
    assert replaced.payload["step_check"]["first_difference"] is None
    used = [node["node_id"] for node in replaced.payload["nodes"]]
    assert len(set(used)) == 3
    # The struck node undid both: no blackhole route, no rate limit, no holding shell.
    network = bridged_cluster.network
    struck = cut.payload["nodes"][1]["address"]
    namespace = next(
        network.namespaces[i] for i in range(network.ranks) if network.rank_address(i) == struck
    )
    assert _ip("-n", namespace, "route", "show", "type", "blackhole").strip() == ""
    qdiscs = subprocess.run(
        ["tc", "-n", namespace, "qdisc", "show"], capture_output=True, text=True, timeout=30
    ).stdout
    assert "tbf" not in qdiscs
    assert not [pid for pid in bridged_cluster.processes() if HOLDER_NAME in _command(pid)]
    assert drill_processes_left(placed, range(3)) == []


def test_nodes_in_one_network_stack_share_an_identity_and_a_namespace_has_its_own(
    bridged_cluster,
) -> None:
    from torchcanary.node_kit.node_link import network_identity

    ask = [
        sys.executable,
        "-c",
        f"from {network_identity.__module__} import network_identity; print(network_identity())",
    ]

    def identity(prefix: list[str]) -> str:
        done = subprocess.run([*prefix, *ask], capture_output=True, text=True, timeout=60)
        return done.stdout.strip()

    here = network_identity()
    assert identity([]) == here  # e.g. two nodes on 127.0.0.1: no link of their own
    inside = identity(bridged_cluster.network.prefix(1))
    assert inside and inside != here
    assert inside.split(":")[0] == here.split(":")[0]  # same machine, other stack


def test_the_heads_client_server_waits_past_the_connect_deadline_for_a_clients_server(
    bridged_cluster,
) -> None:
    """Item 14: the head's proxier gives a client's own server more than Ray's 30 s to
    answer, so a loaded head does not refuse a driver its deadline would still wait for."""
    from local_cluster import (
        CLIENT_SERVER_WAIT_S,
        CLIENT_SERVER_WAIT_VARIABLE,
    )

    head = subprocess.run(
        ["ip", "netns", "pids", bridged_cluster.namespace(0)],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    (proxier,) = [pid for pid in head if "--mode=proxy" in _command(int(pid))]
    environ = Path(f"/proc/{proxier}/environ").read_bytes().split(b"\0")
    assert f"{CLIENT_SERVER_WAIT_VARIABLE}={CLIENT_SERVER_WAIT_S}".encode() in environ


def test_a_bridge_left_on_a_subnet_is_never_chosen_again(monkeypatch) -> None:
    """Item 14: a subnet another cluster's bridge holds (a concurrent run's, or one a killed
    run left behind) would route the driver to either head; a new cluster takes another."""
    import local_cluster

    why = why_unavailable(need_tc=False)
    if why:
        pytest.skip(f"not checked: {why}")
    addresses = _ip("-4", "-o", "addr", "show")
    taken, other = [byte for byte in range(256) if f" 10.214.{byte}." not in addresses][:2]
    tokens = iter([f"{taken:02x}" + "0" * 14, f"{other:02x}" + "0" * 14])
    monkeypatch.setattr(local_cluster.secrets, "token_hex", lambda _: next(tokens))
    bridge = f"tcbstale{taken:02x}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, timeout=30)
    try:
        subprocess.run(
            ["ip", "addr", "add", f"10.214.{taken}.1/24", "dev", bridge], check=True, timeout=30
        )
        chosen = local_cluster._token_with_a_free_subnet()
    finally:
        subprocess.run(["ip", "link", "delete", bridge], check=True, timeout=30)
    assert int(chosen[:2], 16) == other
