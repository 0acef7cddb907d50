"""Units hold their node's GPUs, and record what they saw (issue 30 item 1).

A real local Ray cluster whose nodes declare GPUs they do not have (``num_gpus``, as
``ray start --num-gpus``): Ray hands those out and sets each holder's CUDA_VISIBLE_DEVICES
as for real ones. ``gpu-box`` declares 2; ``masked-box`` declares 2 but its raylet starts
with CUDA_VISIBLE_DEVICES=0, so Ray maps both slots onto one device and a unit sees 1 of
2; ``cpu-box`` declares none. The plain rules (the unit's JSON, the not-checked rule,
mixed profiles) are tested without a cluster first.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from cli_helpers import FIXTURES, run_canary
from fleet_helpers import fleet_run_args, require_ray, stored_rows, unit_ends
from local_cluster import SMOKE, local_node_args, start_local_cluster, stop_local_cluster
from torchcanary.claims.records import save_probe_result
from torchcanary.errors import ConfigError, FleetError
from torchcanary.fleet.across_nodes import gpus_across
from torchcanary.fleet.driver import _decide as fleet_decide
from torchcanary.fleet.executor import Assignment
from torchcanary.fleet.unit import WorkUnit
from torchcanary.hardware_profile import FleetNode, HardwareProfile
from torchcanary.node_kit.devices import shortfall
from torchcanary.nodes_work import placed_profile
from torchcanary.plan import RunPlan
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

PROBE = "sanity.version-pin"  # a claim every plan selects
GPU_NODES = {"gpu-box": 2, "masked-box": 2, "cpu-box": 0}
ROLES_SEEING = {  # what each environment's worker saw, as worker/devices.py reports it
    "two": {"variables": {"CUDA_VISIBLE_DEVICES": "0,1"}, "count": 2},
    "one": {"variables": {"CUDA_VISIBLE_DEVICES": "0"}, "count": 1},
    "unset": {"variables": {}, "count": 2},
    "blank": {"variables": {"CUDA_VISIBLE_DEVICES": ""}, "count": 0},
}


# The plain rules ---------------------------------------------------------------------------
def test_a_unit_carries_its_gpus_and_accelerators_through_json_and_refuses_a_fraction() -> None:
    unit = WorkUnit("u", SMOKE, {"a": 1}, num_cpus=8, num_gpus=4, resources={"neuron_cores": 2})
    assert WorkUnit.from_json(unit.to_json()) == unit
    assert json.loads(unit.to_json())["schema"] == 2
    with pytest.raises(ValueError, match="whole number"):
        WorkUnit("u", SMOKE, num_gpus=0.5)  # type: ignore[arg-type]


def test_a_unit_that_saw_fewer_gpus_than_expected_is_not_checked_never_passed() -> None:
    seeing = ROLES_SEEING
    assert shortfall({"baseline": seeing["two"], "candidate": seeing["two"]}, 2, True) is None
    short = shortfall({"baseline": seeing["two"], "candidate": seeing["one"]}, 2, True)
    assert short is not None and short.startswith("not checked: the unit saw 1 of 2 GPUs (")
    assert "candidate: CUDA_VISIBLE_DEVICES=0, torch 1" in short
    # Blanked (old Ray, a unit that asked for no GPU): it saw none of them.
    blank = shortfall({"baseline": seeing["blank"]}, 2, True)
    assert blank is not None and "saw 0 of 2" in blank
    # No variable: torch's own count decides where the node really has GPUs.
    assert shortfall({"baseline": seeing["unset"]}, 2, True) is None
    assert "saw 2 of 4" in (shortfall({"baseline": seeing["unset"]}, 4, True) or "")
    # A node declaring GPUs it does not have: torch's count (0) is recorded, not judged.
    assert shortfall({"baseline": seeing["two"] | {"count": 0}}, 2, False) is None
    # Nothing expected (a node without GPUs) is never short; an unreadable view is.
    assert shortfall({"baseline": seeing["blank"]}, 0, True) is None
    assert "could not count" in (shortfall({"baseline": {"error": "boom"}}, 1, True) or "")


def test_ranks_across_nodes_of_different_profiles_are_refused_or_named_a_mix() -> None:
    assert placed_profile(["a100", "a100"], mixed=False) == "a100"
    with pytest.raises(ConfigError, match=r"2 profiles \(a100, h100\); add --fleet-mixed"):
        placed_profile(["h100", "a100"], mixed=False)
    assert placed_profile(["h100", "a100", "h100"], mixed=True) == "mixed:a100,h100"


def test_rank_hosts_hold_the_gpus_every_placed_node_has_or_the_number_asked() -> None:
    def node(name: str, gpus: int) -> FleetNode:
        return FleetNode(name, "", HardwareProfile(label=name), gpus=gpus)

    live = [node("a", 8), node("b", 4), node("c", 0)]
    assert gpus_across(live, 2, None) == 4
    # Issue 38 item 2: fewer GPU nodes than asked quietly ran the ranks on none.
    with pytest.raises(
        ConfigError, match=r"--nodes 3: only 2 live node\(s\) of the fleet have GPUs"
    ):
        gpus_across(live, 3, None)
    # ... unless --fleet-mixed asked for nodes of any hardware: the ranks then hold none
    assert gpus_across(live, 3, None, mixed=True) == 0
    assert gpus_across([node("x", 0), node("y", 0)], 2, None) == 0  # a fleet without GPUs
    assert gpus_across(live, 2, 1) == 1
    with pytest.raises(ConfigError, match="at least 1"):
        gpus_across(live, 2, 0)


def test_a_fleet_node_without_a_gpu_is_asked_only_the_claims_its_hardware_can_answer() -> None:
    """The claims' fit narrows their own settings (``probes`` in the claims table)."""
    from torchcanary.claims.fit import fit_plan
    from torchcanary.hardware_profile import HardwareProfile
    from torchcanary.plan import RunPlan

    cpu_only = HardwareProfile(cpu_model="x", cpu_cores=4, arch="x86_64", os="Linux")
    probes = ["sanity.version-pin", "nccl2.collective-contract"]
    plan = RunPlan(
        "torch==2.13.0", "torch==2.14.1", ("claims",), settings={"claims": {"probes": probes}}
    )
    fitted, left_out = fit_plan(plan, cpu_only)
    assert fitted.section_settings("claims")["probes"] == ["sanity.version-pin"]
    assert list(left_out) == ["nccl2.collective-contract"] and "needs cuda" in str(left_out)
    gpu_only = RunPlan(
        "torch==2.13.0", "torch==2.14.1", ("claims",), settings={"claims": {"probes": probes[1:]}}
    )
    assert fit_plan(gpu_only, cpu_only)[0].sections == ()


def test_a_profile_whose_unit_saw_too_few_gpus_is_undone_work_though_another_ran(
    store: SqliteStore,
) -> None:
    """Issue 38 item 2: it was a warning, and the run answered go when another profile ran."""
    plan = RunPlan(
        "torch==2.13.0", "torch==2.14.1", ("claims",), settings={"claims": {"probes": [PROBE]}}
    )
    run_id = store.create_run(plan.to_json())
    ran, short = store.scoped("node-a", "gpu-a"), store.scoped("node-b", "gpu-b")
    ran.save_section_result(run_id, SectionResult("fleet", "claims", "both", "ok", {}))
    for role in ("baseline", "candidate"):
        outcome = Outcome(Verdict.CONFIRMED, "pinned")
        save_probe_result(ran, ProbeResult(run_id, role, PROBE, outcome, 1.0, 0.0))
    why = "not checked: the unit saw 1 of 2 GPUs (baseline: CUDA_VISIBLE_DEVICES=0)"
    ledger = SectionResult("fleet", "claims", "both", "not checked", {"error": why})
    short.save_section_result(run_id, ledger)
    decision = fleet_decide(store, run_id, plan, {})
    assert decision.reasons == (f"[gpu-b] claims: {why} (2 planned unit(s) of it not checked)",)
    relaxed = replace(plan, policy={"block_on_not_run": False})
    assert fleet_decide(store, run_id, relaxed, {}).headline == "go with 2 units not checked"


# On a real Ray cluster ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_cluster():
    """A head holding no work and the three nodes above; no Ray process outlives it."""
    require_ray()
    cluster = start_local_cluster(["gpu-head"], head_cpus=0)
    try:
        for name, gpus in GPU_NODES.items():
            raylet = {"CUDA_VISIBLE_DEVICES": "0"} if name == "masked-box" else {}
            cluster.add_node(**local_node_args(name, 1, raylet, num_gpus=gpus))
        cluster.wait_for_nodes()
        yield cluster
    finally:
        assert stop_local_cluster(cluster) == [], "Ray processes left behind"


@pytest.fixture(scope="module")
def gpu_fleet(gpu_cluster):
    from torchcanary.fleet.ray_connect import connect

    with connect(gpu_cluster.address, timeout_s=60) as executor:
        yield executor


def _given(executor: Any, node: FleetNode, gpus: int) -> tuple[str | None, dict[str, Any]]:
    """CUDA_VISIBLE_DEVICES inside a unit holding ``gpus`` GPUs of ``node``, and its record."""
    from torchcanary.fleet.node_side import DEVICES_OP

    unit = WorkUnit(node.profile.key, SMOKE, {"env": ["CUDA_VISIBLE_DEVICES"]}, num_gpus=gpus)
    record: dict[str, Any] = {}
    seen: list[str | None] = []
    for result in executor.dispatch_streaming([Assignment(node, unit)]):
        output = dict(result.output or {})
        if output.get("op") == DEVICES_OP:
            record = output
        elif "env" in output:
            seen.append(dict(output["env"])["CUDA_VISIBLE_DEVICES"])
    assert len(seen) == 1, seen
    return seen[0], record


@pytest.mark.ray
def test_each_unit_is_given_its_nodes_gpus_and_records_what_it_saw(gpu_fleet) -> None:
    nodes = {node.profile.key: node for node in gpu_fleet.discover()}
    assert {key: nodes[key].gpus for key in GPU_NODES} == GPU_NODES
    for key in GPU_NODES:
        visible, record = _given(gpu_fleet, nodes[key], nodes[key].gpus)
        assert record["asked"]["GPU"] == GPU_NODES[key]
        assert record["unit"]["variables"].get("CUDA_VISIBLE_DEVICES") == visible
        assert record["unit"]["ray_version"]
        ids = record["unit"]["accelerator_ids"]["GPU"]
        if key == "gpu-box":
            assert (visible, ids) == ("0,1", ["0", "1"])
        elif key == "masked-box":  # the raylet could show only device 0: both slots map there
            assert (visible, ids) == ("0", ["0"])
        else:  # no GPU declared, none asked: the record says so, whatever the Ray version
            assert ids == [] and "CUDA_VISIBLE_DEVICES" not in record["unit"]["variables"]
    # A subset (--fleet-gpus 1): one device of the node's two.
    visible, record = _given(gpu_fleet, nodes["gpu-box"], 1)
    assert visible in ("0", "1") and record["unit"]["accelerator_ids"]["GPU"] == [visible]


@pytest.mark.ray
def test_rank_hosts_across_nodes_each_hold_their_nodes_gpus(gpu_fleet, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    from fleet_smoke import DeviceHost

    with pytest.raises(FleetError, match="has 2 live nodes with a CPU and 2 GPU"):
        gpu_fleet.require_nodes(3, gpus=2)
    nodes = {node.node_id: node.profile.key for node in gpu_fleet.discover()}
    group = gpu_fleet.spread(DeviceHost, 2, [], gpus=2)
    try:
        seen = {
            nodes[p.node_id]: s
            for p, s in zip(group.places, group.call_all("visible"), strict=True)
        }
        assert group.spare_nodes() == []  # cpu-box holds no GPU: no spare for this group
    finally:
        group.close()
    assert {key: s["CUDA_VISIBLE_DEVICES"] for key, s in seen.items()} == {
        "gpu-box": "0,1",
        "masked-box": "0",
    }
    [(end, pieces)] = unit_ends(gpu_fleet, [Assignment(_node(gpu_fleet, "cpu-box"), _smoke())])
    assert end.status.value == "ok" and pieces


def _node(executor: Any, key: str) -> FleetNode:
    return next(node for node in executor.discover() if node.profile.key == key)


def _smoke() -> WorkUnit:
    return WorkUnit("after", SMOKE, {})


def _ledger(db: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    rows = stored_rows(
        db, "SELECT profile, verdict, payload_json FROM section_results WHERE section = 'fleet'"
    )
    return {profile: (verdict, json.loads(payload)) for profile, verdict, payload in rows}


def _fleet_run(cluster: Any, work: Path, *flags: str) -> Any:
    store, output = work / "canary.db", work / "out"
    more = ("--fleet", cluster.address, *flags)
    return run_canary(
        *fleet_run_args(store, output, *more, probes="fleet.feature"), cwd=work, timeout=400
    )


@pytest.mark.ray
@pytest.mark.torch_envs
def test_a_fleet_run_records_each_units_gpus_and_a_unit_short_of_them_is_not_checked(
    gpu_cluster, tmp_path: Path
) -> None:
    every = [f"--fleet-select=key={key}" for key in GPU_NODES]
    done = _fleet_run(gpu_cluster, tmp_path, *every)
    assert done.returncode == 1, done.stderr  # the short profile's units were not checked
    ledger = _ledger(tmp_path / "canary.db")
    assert {key: verdict for key, (verdict, _) in ledger.items()} == {
        "gpu-box": "ok",
        "masked-box": "not checked",
        "cpu-box": "ok",
    }
    devices = {key: payload["devices"] for key, (_, payload) in ledger.items()}
    for key, gpus in GPU_NODES.items():
        assert devices[key]["asked"]["GPU"] == gpus
        assert set(devices[key]["roles"]) == {"baseline", "candidate"}
        for role in devices[key]["roles"].values():  # each environment's own fresh worker
            assert isinstance(role["count"], int) and "torch" in role
    for role in devices["gpu-box"]["roles"].values():
        assert role["variables"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert devices["gpu-box"]["unit"]["accelerator_ids"]["GPU"] == ["0", "1"]
    assert devices["cpu-box"]["unit"]["accelerator_ids"]["GPU"] == []
    why = ledger["masked-box"][1]["error"]
    assert why.startswith("not checked: the unit saw 1 of 2 GPUs (baseline: CUDA_VISIBLE_DEVICES=0")
    # The short unit ran nothing; every report says why, none calls it passed.
    with sqlite3.connect(tmp_path / "canary.db") as connection:
        ran = {p for (p,) in connection.execute("SELECT DISTINCT profile FROM probe_results")}
        (detail,) = connection.execute("SELECT decision_json FROM runs").fetchone()
        (fleet,) = connection.execute(
            "SELECT content FROM artifacts WHERE name = 'fleet.json'"
        ).fetchone()
    assert ran == {"gpu-box", "cpu-box"}
    assert any(
        r.startswith("[masked-box] claims: not checked") for r in json.loads(detail)["reasons"]
    )
    [results] = list((tmp_path / "out").rglob("results.json"))
    units = {u["profile"]: u for u in json.loads(results.read_text())["fleet"]["units"]}
    assert units["masked-box"]["status"] == "not checked"
    assert units["gpu-box"]["devices"]["unit"]["variables"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    [summary] = list((tmp_path / "out").rglob("summary.md"))
    markdown = summary.read_text()  # every unit says what it was given, or that it got none
    assert (
        "Units were given: claims: 2 GPUs asked, CUDA_VISIBLE_DEVICES=0,1, "
        "torch sees baseline 0 / candidate 0"
    ) in markdown
    assert "Units were given: claims: no GPUs asked, no visible-devices variable" in markdown
    [junit] = list((tmp_path / "out").rglob("junit.xml"))
    [case] = [
        case
        for case in ElementTree.parse(junit).iter("testcase")
        if case.get("classname") == "fleet [masked-box]"
    ]
    [skipped] = list(case)
    assert skipped.tag == "skipped" and skipped.get("message") == why
    assert (json.loads(fleet)["engine"], json.loads(fleet)["gpus"]) == ("ray", None)


@pytest.mark.ray
@pytest.mark.torch_envs
def test_fleet_gpus_gives_each_unit_that_many_and_more_than_a_node_has_is_exit_2(
    gpu_cluster, tmp_path: Path
) -> None:
    done = _fleet_run(gpu_cluster, tmp_path, "--fleet-select=key=gpu-box", "--fleet-gpus", "1")
    assert done.returncode in (0, 1), done.stderr
    verdict, payload = _ledger(tmp_path / "canary.db")["gpu-box"]
    assert verdict == "ok" and payload["devices"]["asked"]["GPU"] == 1
    for role in payload["devices"]["roles"].values():
        assert role["variables"]["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    (tmp_path / "more").mkdir()
    too_many = _fleet_run(gpu_cluster, tmp_path / "more", "--fleet-gpus", "3")
    assert too_many.returncode == 2
    assert too_many.stderr.strip().splitlines() == [
        "torchcanary: error: --fleet-gpus 3: cpu-box has 0, gpu-box has 2, gpu-head has 0, "
        "masked-box has 2; lower it, or leave those profiles out with --fleet-select"
    ]


@pytest.mark.ray
def test_a_bench_across_nodes_of_two_profiles_is_refused_in_one_line(
    gpu_cluster, tmp_path: Path
) -> None:
    flags = ["--fleet", gpu_cluster.address, "--nodes", "2", "--output", "out"]
    done = run_canary("bench", *flags, cwd=tmp_path, timeout=200)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "torchcanary: error: --nodes 2 placed ranks on nodes of 2 profiles (gpu-box, "
        "masked-box); add --fleet-mixed to run across them anyway, filed under "
        "mixed:gpu-box,masked-box"
    ]
