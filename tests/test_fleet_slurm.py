"""The Slurm fleet engine on a real Slurm cluster (tests/slurm_cluster.py): ``gpu-box`` (two
fake GPUs, and the feature the ``canary_fleet`` probes look for) and ``plain-box`` stand for
two hardware profiles; ``plain-box-2``, of plain-box's profile, starts late, for --resume.
One cluster (one slurmctld, a slurmd per node, all on this host: ``slurm_cluster`` in
conftest.py, shared with the fleet contract's test) serves the whole module; after its last
test no daemon or job process is left.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import canary_command, canary_env, run_canary, run_canary_here
from env_specs import BASELINE_SPEC, CANDIDATE_SPEC
from fleet_helpers import (
    collective_bench_plan,
    drill_processes_left,
    fleet_run_args,
    probe_rows,
    stored_rows,
    unit_ends,
)
from slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

SMOKE = "fleet_smoke:smoke"
NOTICED = re.compile(r"noticed (\d+\.\d)s after its last heartbeat")


@pytest.fixture(scope="module")
def slurm_fleet(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory):
    from torchcanary.fleet.connect import connect_fleet

    with connect_fleet("slurm", fleet_dir=tmp_path_factory.mktemp("fleet-dir")) as executor:
        yield executor


def test_cluster_runs_a_job_step_on_both_nodes_and_gives_a_gpu_job_its_device_ids(
    slurm_cluster: SlurmCluster,
) -> None:
    names = slurm_cluster.run("srun", "-N2", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME")
    assert sorted(names.split()) == ["gpu-box", "plain-box"]
    seen = slurm_cluster.run(
        "srun", "-w", "gpu-box", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES"
    )
    assert seen.strip() == "0"


def test_discovery_makes_a_profile_of_each_feature_and_gres_group(slurm_fleet) -> None:
    nodes = slurm_fleet.discover()
    assert [(node.node_id, node.profile.key) for node in nodes] == [
        ("gpu-box", "gpu-box"),
        ("plain-box", "plain-box"),
    ]
    assert slurm_fleet.silent_nodes == [] and slurm_fleet.engine == "slurm"
    # The GPUs Slurm counts come from the GRES (the facts find none: they are fake); the
    # discovery step asked for them, so it was given both and the profile can be checked.
    assert [node.gpus for node in nodes] == [2, 0]
    assert [node.shortfall for node in nodes] == ["", ""]
    # The facts were read on the node itself.
    assert all(node.profile.cpu_cores >= 1 and node.profile.os for node in nodes)


def test_units_stream_pieces_before_their_end_hold_their_gpus_and_get_no_secret(
    slurm_fleet,
) -> None:
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    gpu, plain = slurm_fleet.discover()
    wanted = ["CUDA_VISIBLE_DEVICES", "CANARY_TEST_FEATURE", "PGPASSWORD", "PYTEST_CURRENT_TEST"]
    payload = {"pieces": 2, "gap_s": 1.0, "env": wanted}
    secret = {"PGPASSWORD": "pw"}
    assignments = [
        Assignment(gpu, WorkUnit("smoke@gpu-box", SMOKE, payload, env=secret, num_gpus=2)),
        Assignment(plain, WorkUnit("smoke@plain-box", SMOKE, payload)),
        Assignment(plain, WorkUnit("broken@plain-box", SMOKE, {"pieces": 0, "fail": "boom"})),
    ]
    ends = {end.unit_id: (end, pieces) for end, pieces in unit_ends(slurm_fleet, assignments)}
    end, pieces = ends["smoke@gpu-box"]
    assert end.status is UnitStatus.OK and end.node_id == "gpu-box"
    assert [piece["piece"] for piece in pieces] == [0, 1]
    seen = dict(pieces[0]["env"])
    # The job holds the node's two GPUs; the node's own variable reached it; the driver's
    # secret and its other variables did not (--export lists only a few names).
    assert seen == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CANARY_TEST_FEATURE": "1",
        "PGPASSWORD": None,
        "PYTEST_CURRENT_TEST": None,
    }
    assert dict(ends["smoke@plain-box"][1][0]["env"])["CUDA_VISIBLE_DEVICES"] is None
    broken = ends["broken@plain-box"][0]
    assert broken.status is UnitStatus.FAILED and broken.error == "RuntimeError: boom"


def test_a_forged_result_line_is_refused_named_and_never_handed_on(
    slurm_cluster: SlurmCluster, slurm_fleet
) -> None:
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit

    plain = next(node for node in slurm_fleet.discover() if node.node_id == "plain-box")
    unit = WorkUnit("long@forged", SMOKE, {"pieces": 30, "gap_s": 1.0})
    results = slurm_fleet.dispatch_streaming([Assignment(plain, unit)])
    first = next(results)
    assert first.status is UnitStatus.PARTIAL
    [out] = slurm_fleet.fleet_dir.glob("units-*/*-long_forged.jsonl")
    # Someone who can write the folder adds an end record that says the unit passed.
    forged = UnitResult("long@forged", UnitStatus.OK, "plain-box", "").to_json()
    with out.open("a", encoding="utf-8") as lines:
        lines.write(f"{'0' * 64} {forged}\n")
    rest = list(results)
    end = rest[-1]
    assert end.status is UnitStatus.FAILED
    assert re.fullmatch(
        rf"error: refused line \d+ of {re.escape(str(out))}: its MAC does not match the "
        r"dispatch's key \(forged or edited\)",
        end.error or "",
    ), end.error
    assert all(result.status is UnitStatus.PARTIAL for result in rest[:-1])
    # Its job was cancelled with it: nothing of it is left running.
    held = slurm_cluster.run(
        "squeue", "-h", "-t", "running,pending", "-n", "torchcanary-long@forged"
    )
    assert held == ""


def test_the_shared_folder_and_every_unit_file_are_the_users_alone(slurm_fleet) -> None:
    import stat

    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    gpu = next(node for node in slurm_fleet.discover() if node.node_id == "gpu-box")
    [(end, _)] = unit_ends(slurm_fleet, [Assignment(gpu, WorkUnit("smoke@modes", SMOKE, {}))])
    assert end.status is UnitStatus.OK, end.error
    [batch] = [path.parent for path in slurm_fleet.fleet_dir.glob("units-*/*-smoke_modes.json")]
    modes = {
        str(path.relative_to(batch.parent)): stat.S_IMODE(path.stat().st_mode)
        for path in [batch.parent, batch, *batch.iterdir()]
    }
    assert modes == {
        ".": 0o700,  # --fleet-dir
        batch.name: 0o700,
        f"{batch.name}/key": 0o600,
        f"{batch.name}/000-smoke_modes.json": 0o600,  # the unit, signed
        f"{batch.name}/000-smoke_modes.jsonl": 0o600,  # its result lines, signed
        f"{batch.name}/000-smoke_modes.beat": 0o600,
        f"{batch.name}/000-smoke_modes.log": 0o600,  # the job log: sbatch handed it the umask
    }


def test_an_edited_unit_file_is_refused_on_the_node() -> None:
    """The node side alone: a unit file changed after the driver signed it never runs."""
    import tempfile

    from torchcanary.fleet.signed_lines import new_key, sign, write_private
    from torchcanary.fleet.slurm_node import run_unit
    from torchcanary.fleet.unit import WorkUnit

    with tempfile.TemporaryDirectory() as folder:
        batch = Path(folder)
        key = new_key(batch)
        signed = sign(key, WorkUnit("u", SMOKE, {"echo": "driver"}).to_json())
        write_private(batch / "u.json", signed.replace('"driver"', '"attacker"'))
        with pytest.raises(SystemExit) as refused:
            run_unit(batch / "u.json", batch / "u.jsonl")
        assert str(refused.value) == (
            f"slurm_node: unit file {batch / 'u.json'} refused: its MAC does not match the "
            "dispatch's key (forged or edited)"
        )
        assert not (batch / "u.jsonl").exists()


@pytest.mark.parametrize("strike", ["scancel", "down"])
def test_a_unit_whose_job_is_cancelled_or_whose_node_is_taken_down_ends_lost(
    slurm_cluster: SlurmCluster, slurm_fleet, strike: str
) -> None:
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    plain = next(node for node in slurm_fleet.discover() if node.node_id == "plain-box")
    unit = WorkUnit(f"long@{strike}", SMOKE, {"pieces": 30, "gap_s": 1.0})
    results = slurm_fleet.dispatch_streaming([Assignment(plain, unit)])
    first = next(results)
    assert first.status is UnitStatus.PARTIAL
    if strike == "scancel":
        [job] = slurm_cluster.run("squeue", "-h", "-w", "plain-box", "-o", "%i").split()
        slurm_cluster.run("scancel", job)
    else:
        slurm_cluster.down("plain-box")
    try:
        end = next(result for result in results if result.status is not UnitStatus.PARTIAL)
    finally:
        if strike == "down":
            slurm_cluster.run("scontrol", "update", "NodeName=plain-box", "State=RESUME")
            slurm_cluster.wait_idle(["plain-box"])
    assert end.status is UnitStatus.LOST, end.error
    assert ("CANCELLED" if strike == "scancel" else "NODE_FAIL") in (end.error or "")
    noticed = NOTICED.search(end.error or "")
    assert noticed and float(noticed.group(1)) == end.noticed_s < 10, end.error


def test_a_unit_whose_node_goes_silent_is_lost_within_the_heartbeat_bound(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from torchcanary.fleet.connect import connect_fleet
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.slurm_site import parse_site
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    site = parse_site({"lost_after_s": 4})
    with connect_fleet("slurm", fleet_dir=tmp_path, slurm_site=site) as fleet:
        plain = next(node for node in fleet.discover() if node.profile.key == "plain-box")
        unit = WorkUnit("long@silent", SMOKE, {"pieces": 60, "gap_s": 1.0})
        results = fleet.dispatch_streaming([Assignment(plain, unit)])
        node = next(results).node_id  # the node Slurm chose for it
        time.sleep(1.5)  # the reader has seen the job running
        # Its slurmd and its job's processes stop answering, as a hung node's do.
        frozen = slurm_cluster.freeze_node(node)
        struck = time.monotonic()
        try:
            end = next(result for result in results if result.status is not UnitStatus.PARTIAL)
            took = time.monotonic() - struck
            state = slurm_cluster.node_states()[node]
        finally:
            slurm_cluster.thaw(frozen)
    assert end.status is UnitStatus.LOST, end.error
    assert f"RUNNING but no heartbeat (bound 4s); noticed {end.noticed_s:.1f}s" in (end.error or "")
    assert 4 < (end.noticed_s or 0) < 7 and took < 7
    # Before Slurm's own SlurmdTimeout (10 s here): slurmctld still counted the node up.
    assert not state.endswith("*") and not state.startswith("down"), state
    slurm_cluster.wait_idle([node])


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("idle", True),
        ("mixed", True),
        ("allocated", True),
        ("completing", True),
        ("idle~", True),  # powered off to save power: Slurm boots it for a job
        ("idle#", True),  # powering up
        ("planned", True),
        ("mixed-", True),
        ("idle*", False),  # slurmd not answering
        ("down*", False),
        ("down", False),
        ("drained", False),
        ("draining", False),
        ("drained*", False),
        ("idle@", False),  # reboot pending
        ("idle^", False),  # rebooting
        ("idle%", False),  # powering down
        ("idle!", False),  # to be powered down
        ("idle$", False),  # maintenance reservation
        ("maint", False),
        ("fail", False),
        ("failing", False),
        ("unknown", False),
        ("future", False),
        ("inval", False),
        ("reserved", False),  # an advanced reservation the run does not name
        ("", False),
    ],
)
def test_node_states_with_their_flags_are_parsed_from_sinfo(state: str, usable: bool) -> None:
    """sinfo's %T text (the parsing only): which states take a unit."""
    from torchcanary.fleet.slurm_cli import usable_state

    assert usable_state(state) is usable


def test_a_reserved_node_takes_work_when_the_run_names_a_reservation() -> None:
    from torchcanary.fleet.slurm_cli import parse_state, usable_state

    assert usable_state("reserved", reserved_ok=True)
    assert not usable_state("reserved*", reserved_ok=True)
    assert parse_state("DRAINED*") == ("drained", frozenset("*"))


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster: SlurmCluster, tmp_path_factory, real_torch_envs) -> dict[str, Any]:
    """`run --fleet slurm` on gpu-box and plain-box; plain-box loses power mid-run; then
    plain-box-2 (same profile) joins and `--resume` finishes the run."""
    work = tmp_path_factory.mktemp("slurm-run")
    db, output = work / "canary.db", work / "out"
    first = subprocess.Popen(
        canary_command(
            *fleet_run_args(
                db,
                output,
                "--fleet",
                "slurm",
                "--fleet-dir",
                str(work / "f"),
                "--slurm-args=--comment=canary-run",
            )
        ),
        cwd=work,
        env=canary_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and first.poll() is None:
        if any(key[0] == "plain-box" for key in probe_rows(db)):
            break  # plain-box's slow probe runs now
        time.sleep(0.2)
    struck = time.monotonic()
    slurm_cluster.kill_node("plain-box")
    out, err = first.communicate(timeout=300)
    ended_s = time.monotonic() - struck
    before = probe_rows(db)
    ledger_before = stored_rows(
        db, "SELECT profile, key, verdict, payload_json FROM section_results"
    )
    reports_before = _reports(output)  # --resume rewrites them
    slurm_cluster.start_node("plain-box-2")
    resumed = run_canary(
        *fleet_run_args(db, output, "--resume", "--fleet-dir", str(work / "f")),
        cwd=work,
        timeout=400,
    )
    return {
        "db": db,
        "output": output,
        "first": (first.returncode, out, err),
        "ended_s": ended_s,
        "before": before,
        "ledger_before": ledger_before,
        "reports_before": reports_before,
        "resumed": resumed,
        "after": probe_rows(db),
    }


def _reports(output: Path) -> dict[str, str]:
    """The first run's results.json and summary.md, as text."""
    [run_dir] = [p for p in output.iterdir() if p.name != "latest"]
    return {name: (run_dir / name).read_text() for name in ("results.json", "summary.md")}


@pytest.fixture(scope="module")
def real_torch_envs(baseline_env, candidate_env) -> None:
    """The two torch environments, built in the session's cache before any node needs them."""


@pytest.mark.torch_envs
def test_a_run_on_slurm_stores_each_profiles_results_in_the_claims_matrix(slurm_run) -> None:
    after = slurm_run["after"]
    assert set(after) == {
        (profile, role, probe)
        for profile in ("gpu-box", "plain-box")
        for role in ("baseline", "candidate")
        for probe in ("fleet.feature", "fleet.slow")
    }
    assert after[("gpu-box", "candidate", "fleet.feature")][2] == "confirmed"
    assert after[("plain-box", "candidate", "fleet.feature")][2] == "refuted"
    assert {node for (profile, *_), (node, *_) in after.items() if profile == "gpu-box"} == {
        "gpu-box"
    }
    [run_dir] = [p for p in slurm_run["output"].iterdir() if p.name != "latest"]
    fleet = json.loads((run_dir / "results.json").read_text())["fleet"]
    assert fleet["split_claims"] == ["fleet.feature"]
    assert set(fleet["profiles"]) == {"gpu-box", "plain-box"}
    # The site flags every job carried, in the report's fleet part.
    assert fleet["slurm_site"] == {
        "extra": ["--comment=canary-run"],
        "flags": "--comment=canary-run",
        "lost_after_s": 60.0,
    }
    summary = slurm_run["reports_before"]["summary.md"]
    assert "Every Slurm job carried the site flags `--comment=canary-run`." in summary


@pytest.mark.torch_envs
def test_a_node_killed_mid_run_is_stored_lost_with_the_seconds_it_took_to_notice(
    slurm_run,
) -> None:
    code, _out, err = slurm_run["first"]
    assert code == 3, err[-3000:]
    ledger = {
        (p, key): (verdict, json.loads(js)) for p, key, verdict, js in slurm_run["ledger_before"]
    }
    assert ledger[("gpu-box", "claims")][0] == "ok"
    verdict, payload = ledger[("plain-box", "claims")]
    assert verdict == "lost"
    assert "NODE_FAIL" in payload["error"]
    noticed = payload["noticed_s"]
    assert noticed == float(NOTICED.search(payload["error"]).group(1))
    # Slurm declares a silent node down after SlurmdTimeout (10 s here) and its next ping.
    assert 5 < noticed < 60 and noticed <= slurm_run["ended_s"] + 2
    reports = slurm_run["reports_before"]
    units = json.loads(reports["results.json"])["fleet"]["units"]
    assert {(u["profile"], u["status"], u["noticed_s"]) for u in units} == {
        ("gpu-box", "ok", None),
        ("plain-box", "lost", noticed),
    }
    assert f"claims on `plain-box`: lost (noticed after {noticed:.1f} s)" in reports["summary.md"]
    assert 1 <= sum(key[0] == "plain-box" for key in slurm_run["before"]) < 4


@pytest.mark.torch_envs
def test_resume_on_slurm_redoes_only_what_the_lost_node_had_not_finished(slurm_run) -> None:
    resumed = slurm_run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    before, after = slurm_run["before"], slurm_run["after"]
    for key, value in before.items():
        assert after[key] == value, f"{key} was run again"
    redone = {key for key in after if key not in before}
    assert redone and all(key[0] == "plain-box" for key in redone)
    assert all(after[key][0] == "plain-box-2" for key in redone)
    ledger = stored_rows(slurm_run["db"], "SELECT profile, key, verdict FROM section_results")
    assert sorted(ledger) == [("gpu-box", "claims", "ok"), ("plain-box", "claims", "ok")]


@pytest.mark.torch_envs
def test_bench_fleet_slurm_nodes_2_on_cpu_nodes_runs_one_gloo_rank_per_node(
    slurm_cluster: SlurmCluster, tmp_path: Path, real_torch_envs
) -> None:
    from torchcanary.bench.across_nodes import NODE_BENCH_ARTIFACT, NodeBench
    from torchcanary.bench.result import BenchMeasured, from_rows
    from torchcanary.fleet.across_nodes import NodesVenue
    from torchcanary.fleet.connect import connect_fleet
    from torchcanary.progress import Progress
    from torchcanary.report.view import load_run_view
    from torchcanary.runner import execute
    from torchcanary.store.sqlite import SqliteStore

    slurm_cluster.start_silent_nodes(["plain-box", "plain-box-2"])
    plan = collective_bench_plan(group_budget_s=0.2)
    with (
        SqliteStore(tmp_path / "canary.db") as store,
        connect_fleet("slurm", fleet_dir=tmp_path / "fleet") as fleet,
    ):
        venue = NodesVenue(NodeBench(fleet, "slurm", 2, mixed=True))
        outcome = execute(plan, store, tmp_path / "out", Progress(quiet=True), venue)
        view = load_run_view(store, outcome.run_id)
        placed = next(
            json.loads(data)
            for name, _, data in store.artifacts(outcome.run_id)
            if name == NODE_BENCH_ARTIFACT
        )
    [profile] = view.profiles
    [record] = from_rows(view.profiles[profile].sections["bench"])
    # No node here has a GPU its hardware facts show: one gloo rank on each of two nodes.
    assert isinstance(record, BenchMeasured), record
    assert record.key == "collective/all_reduce/64KiB/gloox2nodes"
    assert record.nodes == 2 and record.spec["world_size"] == 2
    assert placed["ranks_per_node"] == 1
    assert len({node["node_id"] for node in placed["placed"]}) == 2
    assert slurm_cluster.run("squeue", "-h", "-t", "running,pending") == ""


def test_gpu_nodes_get_one_rank_per_gpu_numbered_node_by_node_layout_and_variables_only() -> None:
    """The GPU path's rank layout and rank variables (no GPU node here to run it on)."""
    from torchcanary.node_kit.rank_layout import RankLayout, rank_env, rank_layout

    eight = rank_layout(2, 8, gpu_nodes=True)
    assert eight == RankLayout(2, 8, on_gpus=True) and eight.world == 16
    assert eight.ranks(1) == [(8 + local, local) for local in range(8)]
    # CPU nodes, or GPU hosts that were given none: one rank per node, as before.
    assert rank_layout(2, 8, gpu_nodes=False) == RankLayout(2, 1, on_gpus=False)
    assert rank_layout(3, 0, gpu_nodes=True) == RankLayout(3, 1, on_gpus=False)
    master = ("10.1.0.1", 29500)
    assert rank_env(eight, 1, 3, master, "ib0", environ={}) == {
        "MASTER_ADDR": "10.1.0.1",
        "MASTER_PORT": "29500",
        "RANK": "11",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "3",
        "LOCAL_WORLD_SIZE": "8",
        "GLOO_SOCKET_IFNAME": "ib0",
        "NCCL_SOCKET_IFNAME": "ib0",
    }
    # The site's own interface (exported to the job by name) is left to NCCL.
    site = rank_env(eight, 0, 0, master, "ib0", environ={"NCCL_SOCKET_IFNAME": "hsn0"})
    assert "NCCL_SOCKET_IFNAME" not in site and site["GLOO_SOCKET_IFNAME"] == "ib0"


def test_gpu_nodes_bench_across_nodes_specs_put_nccl_ranks_on_every_gpu_command_line_only() -> None:
    """The bench's benchmarks across GPU nodes: nccl on cuda, a rank per GPU (no GPU here)."""
    from torchcanary.bench.across_nodes import node_specs
    from torchcanary.bench.settings import BenchSettings
    from torchcanary.node_kit.rank_layout import RankLayout

    settings = BenchSettings.from_json(
        {"families": ["collectives"], "collectives": {"ops": ["all_reduce"], "bytes": [2**20]}}
    )
    layout, [spec] = node_specs(settings, 2, gpus_everywhere=True, gpus_each=8)
    assert layout == RankLayout(2, 8, on_gpus=True)
    assert (spec["backend"], spec["device"], spec["world_size"], spec["nodes"]) == (
        "nccl", "cuda", 16, 2,
    )  # fmt: skip
    assert spec["id"] == "collective/all_reduce/1MiB/ncclx16on2nodes"
    cpu_layout, [cpu] = node_specs(settings, 2, gpus_everywhere=False, gpus_each=0)
    assert cpu_layout == RankLayout(2, 1) and cpu["id"] == "collective/all_reduce/1MiB/gloox2nodes"


def test_gpu_nodes_drill_torchrun_runs_a_nccl_rank_per_gpu_command_line_only(
    tmp_path: Path,
) -> None:
    """A drill node's torchrun line on a GPU node of 8 and on a CPU node (no GPU here)."""
    from torchcanary.drill.catalog import DrillSpec
    from torchcanary.drill.drill_host import DrillHost
    from torchcanary.drill.launch import Area, Launcher

    host = DrillHost(1, "t0k3n")
    try:
        launcher = Launcher(
            sys.executable,
            tmp_path,
            DrillSpec("kill", "restart", ranks=16),
            Area(tmp_path),
            host.procs,
        )
        gpu, _ = host.rank_command(launcher, "10.1.0.1:29400", 2, 3, None, 8, True)
        cpu, _ = host.rank_command(launcher, "10.1.0.1:29400", 2, 3, None, 1, False)
    finally:
        host.close()

    def flag(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    assert (flag(gpu, "--nnodes"), flag(gpu, "--nproc-per-node"), flag(gpu, "--backend")) == (
        "2", "8", "nccl",
    )  # fmt: skip
    assert (flag(cpu, "--nnodes"), flag(cpu, "--nproc-per-node")) == ("2", "1")
    assert "--backend" not in cpu  # the job's default, gloo


@pytest.mark.torch_envs
def test_drill_fleet_slurm_nodes_2_puts_one_rank_on_each_node_in_each_env_and_leaves_nothing(
    slurm_cluster: SlurmCluster, tmp_path: Path, real_torch_envs
) -> None:
    from torchcanary.drill.across_nodes import NODE_DRILL_ARTIFACT
    from torchcanary.report.view import load_run_view
    from torchcanary.store.sqlite import SqliteStore

    # Each environment's node kill takes a node for good: three nodes up, gpu-box (rank 0,
    # never struck) and both plain ones (the run above may have killed plain-box).
    slurm_cluster.start_silent_nodes(["plain-box", "plain-box-2"])
    (tmp_path / "canary.toml").write_text(
        "[drill]\n"
        'faults = ["node-kill:timeout"]\n'
        "steps = 8\nat_step = 3\nckpt_every = 3\ntimeout_s = 10.0\ndrill_timeout_s = 90.0\n"
    )
    flags = ["--fleet", "slurm", "--nodes", "2", "--fleet-mixed", "--fleet-dir", "fleet"]
    envs = ["--baseline", BASELINE_SPEC, "--candidate", CANDIDATE_SPEC]
    done = run_canary(
        "drill",
        *flags,
        *envs,
        "--store",
        "canary.db",
        "--output",
        "out",
        "--quiet",
        cwd=tmp_path,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with SqliteStore(tmp_path / "canary.db") as store:
        run = store.latest_run()
        assert run is not None
        rows = {r.env_role: r for r in load_run_view(store, run.run_id).sections["drill"]}
        placed = next(
            json.loads(data)
            for name, _, data in store.artifacts(run.run_id)
            if name == NODE_DRILL_ARTIFACT
        )
    assert set(rows) == {"baseline", "candidate"}
    killed = []
    for role, row in rows.items():
        # One rank on each of two distinct nodes; two profiles: filed under mixed:A,B.
        ranks_on = [node["node_id"] for node in row.payload["nodes"]]
        assert len(set(ranks_on)) == 2 and ranks_on[0] == "gpu-box", ranks_on
        assert row.payload["ranks_per_node"] == 1 and row.payload["spec"]["ranks"] == 2
        assert placed["placed"][role]["profile"].startswith("mixed:gpu-box,plain-box")
        # node-kill: node 1's slurmd, its job's step daemon and host die at once; the rank
        # on node 0 notices its peer gone, and Slurm counts node 1 down.
        assert row.verdict == "passed", row.payload["reason"]
        assert row.payload["nodes_gone"] == [1] and row.payload["detect_s"] is not None
        assert row.payload["slurm_noticed_s"] is not None
        # The cluster's SlurmdTimeout (10 s) and a margin, read from `scontrol show config`.
        assert row.payload["notice_waited"] == "up to 40 s: SlurmdTimeout 10 s + 30 s"
        killed.append(ranks_on[1])
        assert drill_processes_left(placed, range(2), role) == []
    assert len(set(killed)) == 2  # the candidate ran on the nodes the baseline left
    states = slurm_cluster.node_states()
    assert all(states[name].endswith("*") or states[name].startswith("down") for name in killed)
    assert slurm_cluster.run("squeue", "-h", "-t", "running,pending") == ""
    for name in killed:
        slurm_cluster.start_node(name)


def test_a_partition_slurm_does_not_have_is_one_line_exit_2_and_writes_nothing(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    done = run_canary(
        *fleet_run_args(tmp_path / "canary.db", tmp_path / "out", "--fleet", "slurm:nosuch"),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "torchcanary: error: the Slurm cluster has no partition 'nosuch'; "
        "use --fleet slurm:PART with one of: debug"
    ]
    assert list(tmp_path.iterdir()) == []


def test_no_slurm_module_is_imported_without_fleet_slurm(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from torchcanary.cli import main\n"
        f"code = main(['run', '--resume', '--store', {str(tmp_path / 'c.db')!r}])\n"
        "print(code, sorted(m for m in sys.modules if 'slurm' in m))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert done.stdout.split() == ["2", "[]"], done.stderr


INHERITED = {
    # What sbatch/salloc set in the driver's own job (a bogus job: no such allocation).
    "SLURM_JOB_ID": "999999",
    "SLURM_JOBID": "999999",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "gpu-box",
    "SLURM_NODELIST": "gpu-box",
    "SLURM_NNODES": "1",
    "SLURM_NTASKS": "1",
    "SLURM_CPUS_ON_NODE": "1",
    "SLURM_JOB_PARTITION": "debug",
}


def test_discovery_inside_an_allocation_runs_its_own_steps_not_steps_of_the_drivers_job(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchcanary.fleet.connect import connect_fleet

    # With the driver's job variables, srun is a step of that job (here: one that does
    # not exist), as it would be inside `sbatch --wrap "torchcanary run ..."`.
    inside = {**slurm_cluster.env(), **INHERITED}
    step = subprocess.run(
        ["srun", "-N1", "-n1", "true"], env=inside, capture_output=True, text=True, timeout=60
    )
    assert step.returncode != 0 and "999999" in step.stderr, step.stderr
    for name, value in INHERITED.items():
        monkeypatch.setenv(name, value)
    with connect_fleet("slurm", fleet_dir=tmp_path) as fleet:
        nodes = fleet.discover(timeout_s=120)
    # plain-box-2 is up too once the runs above have started it.
    assert {node.profile.key for node in nodes} == {"gpu-box", "plain-box"}
    assert fleet.silent_nodes == []


def test_a_driver_started_inside_a_real_allocation_discovers_with_steps_of_its_own(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # The driver as the docs start it on a site: itself a batch job (here on plain-box-2,
    # whose one CPU it holds), with sbatch's SLURM_* variables in its environment.
    slurm_cluster.start_silent_nodes(["plain-box", "plain-box-2"])
    slurm_cluster.wait_idle(["gpu-box", "plain-box", "plain-box-2"])
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        "from torchcanary.fleet.connect import connect_fleet\n"
        "with connect_fleet('slurm', fleet_dir=Path(sys.argv[1])) as fleet:\n"
        "    nodes = fleet.discover(timeout_s=120)\n"
        "print(os.environ['SLURM_JOB_ID'], os.environ['SLURMD_NODENAME'])\n"
        "print(sorted((n.node_id, n.profile.key) for n in nodes), fleet.silent_nodes)\n"
    )
    out = tmp_path / "driver.log"
    job = slurm_cluster.run(
        "sbatch", "--parsable", "-w", "plain-box-2", "-o", str(out),
        "--wrap", f"{sys.executable} {driver} {tmp_path / 'fleet'}",
    ).strip()  # fmt: skip
    deadline = time.monotonic() + 240
    while slurm_cluster.run("squeue", "-h", "-j", job, "-t", "pending,running"):
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(1)
    said = out.read_text().splitlines()
    # Its own job on plain-box-2; discovery's steps were jobs of their own, on the node
    # of each group that was free, not steps squeezed into the driver's one-node job.
    assert said[-2:] == [
        f"{job} plain-box-2",
        "[('gpu-box', 'gpu-box'), ('plain-box', 'plain-box'), ('plain-box-2', 'plain-box')] []",
    ], said


def test_placement_names_the_profile_feature_and_excludes_other_hardware_that_has_it() -> None:
    """The command line only: what a unit asks of sbatch for one profile's nodes."""
    from torchcanary.fleet.slurm_cli import SlurmNode
    from torchcanary.fleet.slurm_placement import gres, placement

    def node(name: str, *features: str) -> SlurmNode:
        return SlurmNode(name, features, (), 64, 0, "idle", name)

    h100 = [node("gpu01", "tcprofile_h100", "ib"), node("gpu02", "tcprofile_h100", "ib")]
    a100 = [node("gpu03", "ib", "a100"), node("gpu04", "ib", "a100")]
    bare = [node("cpu01"), node("cpu02")]
    every = [*h100, *a100, *bare]
    assert placement(h100, every) == ["--constraint=tcprofile_h100"]
    # No profile feature: the features the group shares, and nothing else with them.
    assert placement(a100, every) == ["--constraint=a100&ib"]
    assert placement(a100[:1], every) == ["--constraint=a100&ib", "--exclude=gpu04"]
    # No feature at all: every node of another group excluded.
    assert placement(bare, every) == ["--exclude=gpu01,gpu02,gpu03,gpu04"]
    assert gres(8) == ["--gres=gpu:8"] and gres(0) == []


def test_a_gpu_group_whose_discovery_sees_fewer_gpus_than_its_gres_is_not_checked(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchcanary.fleet.connect import connect_fleet

    # gpu-box's discovery step is given its two GPUs but sees one (the cluster's task
    # prolog hides the other, as a GPU lost from the bus would be).
    monkeypatch.setenv("TORCHCANARY_TEST_VISIBLE_GPUS", "0")
    with connect_fleet("slurm", fleet_dir=tmp_path) as fleet:
        nodes = {node.node_id: node for node in fleet.discover(timeout_s=120)}
    assert nodes["gpu-box"].shortfall == (
        "not checked: discovery saw 1 of the 2 GPUs its GRES names "
        "(in its visible-devices variable (no GPU tool))"
    )
    assert nodes["plain-box"].shortfall == ""


def test_a_run_sends_nothing_to_a_profile_whose_discovery_saw_too_few_gpus(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    db, output = tmp_path / "canary.db", tmp_path / "out"
    done = run_canary(
        *fleet_run_args(db, output, "--fleet", "slurm", "--fleet-select", "key=gpu-box"),
        cwd=tmp_path,
        timeout=300,
        TORCHCANARY_TEST_VISIBLE_GPUS="0",
    )
    why = (
        "not checked: discovery saw 1 of the 2 GPUs its GRES names "
        "(in its visible-devices variable (no GPU tool))"
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"gpu-box: {why}" in done.stderr
    ledger = stored_rows(db, "SELECT profile, key, verdict, payload_json FROM section_results")
    assert [(p, key, verdict, json.loads(js)["error"]) for p, key, verdict, js in ledger] == [
        ("gpu-box", "claims", "not checked", why)
    ]
    assert probe_rows(db) == {}  # nothing ran: no unit was sent
    assert list((tmp_path / "canary-results" / "fleet").glob("units-*/*.json")) == []


@pytest.mark.parametrize(
    ("facts", "gres_gpus", "why"),
    [
        ({"visible": {"CUDA_VISIBLE_DEVICES": "0,1"}}, 2, ""),
        ({"gpu_driver": "550.54", "gpu_count": 8}, 8, ""),
        ({}, 0, ""),
        (
            {"gpu_driver": "550.54", "gpu_count": 7},
            8,
            "not checked: discovery saw 7 of the 8 GPUs its GRES names (by its GPU tool)",
        ),
        (
            {"visible": {}},
            2,
            "not checked: discovery saw 0 of the 2 GPUs its GRES names "
            "(in its visible-devices variable (no GPU tool))",
        ),
    ],
)
def test_a_group_whose_discovery_saw_fewer_gpus_than_its_gres_is_not_checked(
    facts: dict[str, Any], gres_gpus: int, why: str
) -> None:
    from torchcanary.fleet.slurm_discovery import discovery_shortfall

    assert discovery_shortfall(facts, gres_gpus) == why


def test_site_flags_reach_every_unit_job_as_scontrol_shows_it(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from torchcanary.fleet.connect import connect_fleet
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.slurm_site import parse_site
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    # What this cluster accepts without accounting: a time limit, memory, a comment.
    site = parse_site({"time": "5", "mem": "100M"}, "--comment=canary-site")
    with connect_fleet("slurm", fleet_dir=tmp_path, slurm_site=site) as fleet:
        plain = next(node for node in fleet.discover() if node.profile.key == "plain-box")
        unit = WorkUnit("smoke@site-flags", SMOKE, {})
        [(end, _)] = unit_ends(fleet, [Assignment(plain, unit)])
    assert end.status is UnitStatus.OK, end.error
    [job] = [
        line
        for line in slurm_cluster.run("scontrol", "-o", "show", "job").splitlines()
        if "JobName=torchcanary-smoke@site-flags " in line
    ]
    assert "TimeLimit=00:05:00" in job and "MinMemoryNode=100M" in job
    assert "Comment=canary-site" in job


def test_each_unit_job_gets_a_time_limit_derived_from_its_estimate_as_scontrol_shows_it(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from torchcanary.fleet.connect import connect_fleet
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    with connect_fleet("slurm", fleet_dir=tmp_path) as fleet:
        plain = next(node for node in fleet.discover() if node.profile.key == "plain-box")
        estimates = {"twelve-min": 12 * 60.0, "one-min": 60.0, "never-seen": None}
        assignments = [
            Assignment(plain, WorkUnit(f"smoke@{name}", SMOKE, {}), estimate)
            for name, estimate in estimates.items()
        ]
        ends = list(unit_ends(fleet, assignments))
    assert [end.status for end, _ in ends] == [UnitStatus.OK] * 3, ends
    jobs = slurm_cluster.run("scontrol", "-o", "show", "job")
    limits = dict(re.findall(r"JobName=torchcanary-smoke@(\S+) .*?TimeLimit=(\S+)", jobs))
    assert {name: limits[name] for name in estimates} == {
        "twelve-min": "00:36:00",  # 3 x 12 min
        "one-min": "00:30:00",  # 3 x 1 min is under the 30 min floor
        "never-seen": "01:00:00",  # 3 x one hour, cut to the partition's MaxTime=60
    }


def test_a_unit_time_limit_is_three_times_its_estimate_with_a_floor_under_the_partition_max(
    tmp_path: Path,
) -> None:
    """The derivation alone: the estimate from the store's history, the limit from it."""
    from torchcanary.fleet.slurm_cli import slurm_minutes
    from torchcanary.fleet.slurm_site import parse_site
    from torchcanary.fleet.unit_time import limit_minutes, unit_estimate
    from torchcanary.report_kit.ledger import LEDGER_SECTION
    from torchcanary.store.rows import SectionResult
    from torchcanary.store.sqlite import SqliteStore

    assert limit_minutes(None, None) == 180  # never seen: 3 x one hour
    assert limit_minutes(20 * 60.0, None) == 60  # 3 x 20 min
    assert limit_minutes(60.0, None) == 30  # 3 x 1 min is under the 30 min floor
    assert limit_minutes(100.5 * 60, None) == 302  # whole minutes, rounded up
    assert limit_minutes(20 * 60.0, 45) == 45  # never above the partition's MaxTime
    assert [slurm_minutes(t) for t in ("1-00:00:00", "2-06", "01:30:00", "90", "30:59")] == [
        1440, 3240, 90, 90, 30,
    ]  # fmt: skip
    assert slurm_minutes("UNLIMITED") is None and slurm_minutes("INFINITE") is None
    # The site's own limit, in the table or among its flags, replaces the derived one.
    assert [parse_site(t, a).sets_time for t, a in [({}, ""), ({"time": "5"}, "")]] == [False, True]
    assert parse_site({}, "--time=10").sets_time and parse_site({}, "-t 10").sets_time
    assert not parse_site({}, "--comment=x").sets_time

    def finished(store: SqliteStore, profile: str, section: str, verdict: str, s: float) -> str:
        run_id = store.create_run({"sections": [section]})
        row = SectionResult(LEDGER_SECTION, section, "both", verdict, {"unit_seconds": s})
        store.scoped("node-a", profile).save_section_result(run_id, row)
        return run_id

    with SqliteStore(tmp_path / "canary.db") as store:
        assert unit_estimate(store, "gpu-box", "bench", "") is None
        finished(store, "gpu-box", "bench", "ok", 600.0)
        finished(store, "gpu-box", "bench", "ok", 900.0)
        finished(store, "gpu-box", "bench", "failed", 5000.0)  # not a finish
        finished(store, "plain-box", "bench", "ok", 7000.0)  # other hardware
        finished(store, "gpu-box", "claims", "ok", 8000.0)  # another unit
        current = finished(store, "gpu-box", "bench", "ok", 9000.0)  # this run's own
        # The longest of the same unit's finishes on the same profile, in the other runs.
        assert unit_estimate(store, "gpu-box", "bench", current) == 900.0


def test_site_flags_on_the_command_line_built_from_a_full_table() -> None:
    """The command line only: account, QoS, reservation and --exclusive need a cluster
    with accounting and a reservation, which the test cluster does not have."""
    from torchcanary.fleet.slurm_site import parse_site

    table = {
        "time": "1-00:00:00",
        "account": "ml-infra",
        "qos": "high",
        "reservation": "qa_window",
        "mem": "0",
        "exclusive": True,
        "extra": "--comment='torch qual' --mail-type=END",
    }
    site = parse_site(table, "--signal=USR1@60")
    assert site.flags() == [
        "--time=1-00:00:00",
        "--account=ml-infra",
        "--qos=high",
        "--reservation=qa_window",
        "--mem=0",
        "--exclusive",
        "--comment=torch qual",
        "--mail-type=END",
        "--signal=USR1@60",
    ]
    assert site.to_json()["flags"].startswith("--time=1-00:00:00 --account=ml-infra")


@pytest.mark.parametrize(
    ("table", "slurm_args", "error"),
    [
        ({"tme": "5"}, "", "[fleet.slurm]: unknown key 'tme'; known keys: time, account, "),
        ({"time": "soon"}, "", "[fleet.slurm]: time 'soon' is not a Slurm time; use MINUTES, "),
        ({"mem": "lots"}, "", "[fleet.slurm]: mem 'lots' is not a size; use e.g. 64G or 500M"),
        ({"exclusive": "yes"}, "", "[fleet.slurm]: exclusive must be true or false, not 'yes'"),
        ({"account": "a b"}, "", "[fleet.slurm]: account 'a b' is not a Slurm name"),
        ({}, "-w gpu01", "--slurm-args: -w is set by torchcanary on every job and cannot be "),
        ({"extra": "--output=x"}, "", "[fleet.slurm]: extra: --output is set by torchcanary"),
        ({}, "comment", "--slurm-args: 'comment' is not a flag; give sbatch flags (--time=60)"),
        ({}, "--comment='x", '--slurm-args: cannot split "--comment=\'x" (No closing quotation)'),
    ],
)
def test_bad_site_flags_are_one_line_config_errors(
    table: dict[str, Any], slurm_args: str, error: str
) -> None:
    from torchcanary.errors import ConfigError
    from torchcanary.fleet.slurm_site import parse_site

    with pytest.raises(ConfigError) as raised:
        parse_site(table, slurm_args)
    assert str(raised.value).startswith(error) and "\n" not in str(raised.value)


def test_a_bad_fleet_slurm_table_or_slurm_args_without_slurm_is_exit_2_in_one_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "canary.toml").write_text('[fleet.slurm]\ntime = "soon"\n')
    done = run_canary_here("run", "--store", "c.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"torchcanary: error: {tmp_path / 'canary.toml'}: [fleet.slurm]: time 'soon' is not a "
        "Slurm time; use MINUTES, HH:MM:SS or D-HH:MM:SS"
    ]
    (tmp_path / "canary.toml").unlink()
    done = run_canary_here("run", "--slurm-args=--comment=x", "--store", "c.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "torchcanary: error: --slurm-args needs a Slurm fleet: add --fleet slurm[:PARTITION]"
    ]
    assert list(tmp_path.iterdir()) == []


def test_slurmd_timeout_is_read_from_scontrol_show_config() -> None:
    from torchcanary.fleet.slurm_cli import parse_slurmd_timeout

    config = (
        "Configuration data as of 2026-12-05T19:20:00\n"
        "SlurmctldTimeout        = 120 sec\n"
        "SlurmdTimeout           = 300 sec\n"
        "SlurmdUser              = root(0)\n"
    )
    assert parse_slurmd_timeout(config) == 300.0
    assert parse_slurmd_timeout(config.replace("300 sec", "10 sec")) == 10.0
    assert parse_slurmd_timeout("SlurmctldTimeout = 120 sec\n") is None
    assert parse_slurmd_timeout("SlurmdTimeout = (null)\n") is None


def test_a_unit_whose_profile_node_is_busy_lands_on_its_idle_twin(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from torchcanary.fleet.connect import connect_fleet
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    # Both plain nodes up (plain-box-2 starts late; the runs above may have killed either).
    slurm_cluster.start_silent_nodes(["plain-box", "plain-box-2"])
    slurm_cluster.wait_idle(["plain-box", "plain-box-2"])
    busy = slurm_cluster.run(
        "sbatch", "--parsable", "-w", "plain-box", "-o", "/dev/null", "--wrap", "sleep 600"
    ).strip()
    try:
        deadline = time.monotonic() + 60
        while slurm_cluster.node_states().get("plain-box") != "allocated":
            assert time.monotonic() < deadline, slurm_cluster.node_states()
            time.sleep(0.3)
        with connect_fleet("slurm", fleet_dir=tmp_path) as fleet:
            # Discovery reads the profile on whichever of its nodes is free.
            nodes = {node.node_id: node for node in fleet.discover(timeout_s=120)}
            assert {name: node.profile.key for name, node in nodes.items()} == {
                "gpu-box": "gpu-box",
                "plain-box": "plain-box",
                "plain-box-2": "plain-box",
            }
            unit = WorkUnit("smoke@busy", SMOKE, {"env": ["SLURMD_NODENAME"]})
            [(end, pieces)] = unit_ends(fleet, [Assignment(nodes["plain-box"], unit)])
    finally:
        slurm_cluster.run("scancel", busy)
    assert end.status is UnitStatus.OK, end.error
    # Asked by feature, not pinned: Slurm ran it on the twin while plain-box was held.
    assert end.node_id == "plain-box-2"
    assert dict(pieces[0]["env"]) == {"SLURMD_NODENAME": "plain-box-2"}


def test_recorded_site_flags_come_back_the_same_for_a_resume() -> None:
    """The command line only: what a run recorded is what its --resume submits with."""
    from torchcanary.fleet.slurm_site import SlurmSite, parse_site

    site = parse_site({"time": "90", "exclusive": True, "extra": "--comment='a b'"}, "--qos=x")
    assert SlurmSite.from_json(site.to_json()) == site


def test_node_groups_with_the_same_hardware_become_one_profile_and_say_so() -> None:
    """The note and the placement only: each group of the test cluster carries a
    tcprofile_ feature of its own, so none merge there."""
    from torchcanary.fleet.slurm_cli import SlurmNode
    from torchcanary.fleet.slurm_discovery import group_key, merge_notes
    from torchcanary.fleet.slurm_placement import placement

    def node(name: str, features: tuple[str, ...], gres: tuple[str, ...] = ()) -> SlurmNode:
        return SlurmNode(name, features, gres, 64, 0, "idle", name)

    rack1, rack2 = node("gpu01", ("rack1",), ("gpu:8",)), node("gpu02", ("rack2",), ("gpu:8",))
    small = node("gpu03", ("tcprofile_l4",), ("gpu:1",))
    other = node("gpu04", ("tcprofile_l4", "nvme"), ("gpu:1",))
    cpu = node("cpu01", ())
    groups = {group_key(n): [n] for n in (rack1, rack2, small, other, cpu)}
    profile_of = {
        group_key(rack1): "8xh100-0a1b2c3d",
        group_key(rack2): "8xh100-0a1b2c3d",
        group_key(small): "l4",
        group_key(other): "l4",
        group_key(cpu): "cpu-x86_64",
    }
    assert merge_notes(groups, profile_of) == [
        "profile 8xh100-0a1b2c3d: node groups [gpu01] (features rack1; GRES gpu:8; 64 CPUs) "
        "and [gpu02] (features rack2; GRES gpu:8; 64 CPUs) are one profile: the same "
        "hardware facts, and no tcprofile_ feature to tell them apart",
        "profile l4: node groups [gpu03] (features tcprofile_l4; GRES gpu:1; 64 CPUs) and "
        "[gpu04] (features tcprofile_l4,nvme; GRES gpu:1; 64 CPUs) are one profile: the "
        "feature tcprofile_l4 names them one",
    ]
    # No node is dropped: a unit of the merged profile may land on either group's node.
    every = [rack1, rack2, small, other, cpu]
    assert placement([rack1, rack2], every) == ["--exclude=cpu01,gpu03,gpu04"]


def test_discovery_waits_for_a_free_node_of_a_busy_profile_and_says_so(
    slurm_cluster: SlurmCluster,
) -> None:
    from torchcanary.fleet.slurm_cli import sinfo_nodes
    from torchcanary.fleet.slurm_discovery import GroupReader, group_key

    names = ["plain-box", "plain-box-2"]
    slurm_cluster.wait_idle(names)  # both up: the test above started them
    for name in names:  # every node of the profile busy for a while
        slurm_cluster.run("sbatch", "-w", name, "-o", "/dev/null", "--wrap", "sleep 18")
    deadline = time.monotonic() + 60
    while any(slurm_cluster.node_states().get(name) != "allocated" for name in names):
        assert time.monotonic() < deadline, slurm_cluster.node_states()
        time.sleep(0.3)
    every = sinfo_nodes("debug")
    plain = [node for node in every if node.name in names]
    said: list[str] = []
    started = time.monotonic()
    [read] = GroupReader("debug", [], said.append).read_all(
        {group_key(plain[0]): plain}, every, timeout_s=120
    )
    assert read is not None and read.facts["cpu_cores"] >= 1
    assert time.monotonic() - started > 15
    # Said every 15 s while it waits (a second more under load).
    assert re.fullmatch(
        r"discovery: waited 1[56]s for a free node of plain-box,plain-box-2 "
        r"\(--constraint=tcprofile_plain-box\)",
        said[0],
    ), said


def test_jobs_inherit_the_fabric_library_and_proxy_variables_but_no_password() -> None:
    from torchcanary.fleet.slurm_job_line import export_list

    driver = {
        "PATH": "/usr/bin",
        "LD_LIBRARY_PATH": "/opt/nccl/lib",
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_SOCKET_IFNAME": "ib0",
        "UCX_TLS": "rc,sm",
        "FI_PROVIDER": "efa",
        "http_proxy": "http://proxy.site:3128",
        "https_proxy": "http://alice:hunter2@proxy.site:3128",  # a password: never sent
        "NCCL_AUTH_TOKEN": "x",  # a secret name: never sent
        "CUDA_VISIBLE_DEVICES": "0,1",  # Slurm sets it for the job's own GPUs
        "EDITOR": "vi",
    }
    assert export_list(driver).split(",") == [
        "PATH", "LD_LIBRARY_PATH", "http_proxy",
        "FI_PROVIDER", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "UCX_TLS",
    ]  # fmt: skip


def test_a_drill_host_job_asks_for_all_the_cpus_of_the_smallest_node_that_fits() -> None:
    """Command-line test (the local cluster's nodes have one CPU each, so only a
    production cluster shows the difference): torchrun and its ranks get the node's CPUs,
    not the one core a ``-c 1`` cgroup would squeeze them onto."""
    from torchcanary.fleet.slurm_cli import SlurmNode
    from torchcanary.fleet.slurm_hosts import member_cpus

    def node(name: str, cpus: int, gres: tuple[str, ...] = (), state: str = "idle") -> SlurmNode:
        return SlurmNode(name, (), gres, cpus, 1000, state, "10.0.0.1")

    nodes = [
        node("h100-1", 96, ("gpu:h100:8",)),
        node("h100-2", 112, ("gpu:h100:8",)),
        node("h100-3", 64, ("gpu:h100:8",), state="drained"),  # not usable: not counted
        node("cpu-1", 32),
    ]
    assert member_cpus(nodes, gpus=8) == 96
    assert member_cpus(nodes, gpus=0) == 32
    assert member_cpus(nodes, gpus=16) == 1  # none fits: Slurm says why the job waits


def test_sacct_lines_are_read_as_job_states() -> None:
    """Parsing test: only a cluster with slurmdbd answers sacct (the local one keeps no
    accounting; the next test checks that)."""
    from torchcanary.fleet.slurm_cli import JobState, parse_sacct

    text = (
        "101|COMPLETED|None|gpu-a-01\n"
        "102|CANCELLED by 1000|None|gpu-a-02\n"
        "103|NODE_FAIL|None|gpu-a-03\n"
        "104|PENDING|Resources|None assigned\n"
    )
    assert parse_sacct(text) == {
        "101": JobState("101", "COMPLETED", "", "gpu-a-01"),
        "102": JobState("102", "CANCELLED", "", "gpu-a-02"),
        "103": JobState("103", "NODE_FAIL", "", "gpu-a-03"),
        "104": JobState("104", "PENDING", "Resources", ""),
    }


def test_a_cluster_without_accounting_is_asked_once_and_says_so(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchcanary.fleet import slurm_cli

    monkeypatch.setattr(slurm_cli, "_accounting", {})
    assert slurm_cli.accounting_note() == ""
    # squeue knows none of the ids (it fails outright: an answer, not silence); no sacct
    assert slurm_cli.job_states(["999999"]) == {}
    note = slurm_cli.accounting_note()
    assert note.startswith("squeue only (no accounting: Slurm's sacct failed"), note
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(slurm_cli, "slurm", lambda *command, **_: asked.append(command) or "")
    slurm_cli.job_states(["999999"])
    assert [command[0] for command in asked] == ["squeue"]  # sacct is not asked again
