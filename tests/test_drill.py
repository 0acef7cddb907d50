"""Fault drills, run for real: torchrun, gloo ranks, signals, namespaces, the store.

The job is shortened (few steps, short timeouts) so the file stays within a few minutes on
two cores; every test also checks that the drill left no process and no namespace behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from xml.etree import ElementTree

import pytest

from torchcanary.drill import report, section
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.drill import DrillRunner
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.launch import machine_capacity_problem
from torchcanary.drill.settings import parse_settings
from torchcanary.errors import ConfigError
from torchcanary.report.json_out import render_json
from torchcanary.report.view import load_run_view
from torchcanary.store.rows import SectionResult

SHORT = {
    "steps": 12,
    "at_step": 6,
    "ckpt_every": 4,
    "timeout_s": 4.0,
    "step_pad_s": 0.05,
    "drill_timeout_s": 150.0,
}


pytestmark = pytest.mark.usefixtures("drill_leak_check")


def spec(fault: str, recovery: str, **overrides: object) -> DrillSpec:
    return DrillSpec(fault, recovery, **{**SHORT, **overrides})  # type: ignore[arg-type]


# the job itself ------------------------------------------------------------------------
@pytest.mark.torch_envs
def test_built_in_fault_free_run_repeats_itself_is_kept_on_disk_and_made_again_on_change(
    baseline_env, import_root, tmp_path
):
    """The job's fault-free run, made twice in the same shape (the first time and on
    --fresh-reference): identical replicas and the same losses both times, which is what
    every drill is compared with; reused from disk for another drill, made again when the
    job is longer."""
    made: list[DrillSpec] = []

    class Counting(DrillRunner):
        def _run_reference(self, clean: DrillSpec) -> dict:
            made.append(clean)
            return super()._run_reference(clean)

    cache = KeptReferences(tmp_path / "kept")

    def runner(fresh: bool = False) -> DrillRunner:
        return Counting(baseline_env.python, import_root, tmp_path / "work", cache, "env-a", fresh)

    job = spec("kill", "restart-unshared", steps=8, at_step=3)
    first = runner().reference(job)
    assert first["ok"] and "cached" not in first and len(made) == 1, first.get("reason")
    assert first["parallel"] == "ddp"  # the mode the in-place drills are compared in
    assert first["params_identical"] and len(first["digests"]) == 1
    assert first["final_loss"] < first["first_step_loss"] - 0.2  # it learned: not a constant
    # Every step's loss and gradient norm, to compare drills with step by step.
    assert [row[0] for row in first["steps"]] == list(range(8))
    assert all(row[2] > 0 for row in first["steps"])
    again = runner().reference(replace(job, fault="hang", recovery="timeout"))
    assert len(made) == 1 and again["cached"]["age_s"] >= 0  # another drill, the same job
    assert again["steps"] == first["steps"] and again["reason"].startswith("reused from the cache")
    assert runner().reference(replace(job, steps=9))["final_loss"] is not None
    assert len(made) == 2  # a longer job is another fault-free run
    second = runner(fresh=True).reference(job)
    assert "cached" not in second and len(made) == 3
    # Made again from scratch, the job repeats itself: the same loss, weights and steps.
    assert second["final_loss"] == first["final_loss"]
    assert second["digests"] == first["digests"]
    assert second["steps"] == first["steps"]


# faults and recovery -------------------------------------------------------------------
@pytest.mark.torch_envs
def test_built_in_job_checkpoints_and_recovers_in_an_environment_without_numpy(
    bare_baseline_env, import_root, tmp_path
):
    """Issue 28 item 2: the README's command builds torch alone; the built-in job's
    checkpoints (torch.distributed.checkpoint plans with object collectives, which read
    bytes through numpy) must not need numpy, so a default drill reaches a real verdict."""
    probe = [bare_baseline_env.python, "-c", "import numpy"]
    assert subprocess.run(probe, capture_output=True).returncode != 0, "numpy is installed"
    runner = DrillRunner(bare_baseline_env.python, import_root, tmp_path)
    outcome = runner.run(spec("kill", "restart-unshared"))
    payload = outcome.payload
    assert outcome.verdict == "passed", payload["reason"]
    assert "numpy" not in str(payload["first_error"]).lower()
    assert payload["resume_step"] == 4  # resumed from the checkpoint after step 3
    assert payload["step_check"]["steps_compared"] == SHORT["steps"]


_OBJECT_COLLECTIVE_WITHOUT_NUMPY = """
import sys
sys.modules["numpy"] = None  # as if numpy were not installed
import torch.distributed as dist
from torchcanary.worker.numpy_free import route_object_collectives_around_numpy
routed = route_object_collectives_around_numpy() if sys.argv[1] == "routed" else False
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
gathered = [None]
dist.all_gather_object(gathered, {"plan": "x" * 5000})
print(routed, len(gathered[0]["plan"]), flush=True)
# What is checked is printed: end before interpreter teardown, where gloo's threads can
# abort the process (as every rank torchcanary starts does).
dist.destroy_process_group()
import os
os._exit(0)
"""


@pytest.mark.torch_envs
@pytest.mark.parametrize("role", ["baseline", "candidate"])
def test_object_collectives_read_their_bytes_without_numpy_in_both_torch_versions(
    role, request, import_root
):
    """Issue 28 item 2: torch 2.13 and 2.14 (whose ``_tensor_to_object`` differ) both
    gather objects without numpy once routed; unrouted, both need numpy."""
    env = request.getfixturevalue(f"{role}_env")
    environ = {**os.environ, "PYTHONPATH": str(import_root)}

    def gather(mode: str) -> subprocess.CompletedProcess[str]:
        command = [env.python, "-c", _OBJECT_COLLECTIVE_WITHOUT_NUMPY, mode]
        return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=120)

    routed, plain = gather("routed"), gather("plain")
    assert routed.returncode == 0 and routed.stdout.split() == ["True", "5000"], routed.stderr
    assert plain.returncode != 0 and "Numpy is not available" in plain.stderr


@pytest.mark.torch_envs
@pytest.mark.netns
def test_cut_link_in_a_namespace_surfaces_as_timeout_and_namespaces_are_removed(
    baseline_env, import_root, tmp_path
):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("not checked: network namespaces need root and iproute2")
    runner = DrillRunner(baseline_env.python, import_root, tmp_path)
    outcome = runner.run(spec("net-down", "timeout"))
    assert outcome.verdict == "passed", outcome.payload["reason"]
    assert outcome.payload["namespaces_after_cleanup"] == []
    assert "timeout" in outcome.payload["error_kinds"]


@pytest.mark.torch_envs
def test_fsdp2_job_is_recovered_in_place_as_fsdp2_from_its_last_checkpoint(
    candidate_env, import_root, tmp_path
):
    runner = DrillRunner(candidate_env.python, import_root, tmp_path)
    # A longer group timeout: the replacement's first collective, on a busy machine.
    outcome = runner.run(spec("kill", "reconfigure", parallel="fsdp", timeout_s=10.0))
    payload = outcome.payload
    assert outcome.verdict == "passed", payload["reason"]
    assert payload["parallel"] == "fsdp" and "under fsdp" in payload["reason"]
    assert payload["reference"]["parallel"] == "fsdp"
    # The killed rank's shards existed only in the checkpoint after step 3: steps 4-6 redone.
    assert payload["restored"].endswith("checkpoint of step 3")
    assert payload["steps_lost"] == 3 and payload["resume_step"] == 4
    assert payload["step_check"]["first_differing_step"] is None
    assert [row["step"] for row in payload["step_diffs"] if row["runs"] > 2] == [4, 5, 6]
    assert payload["params_identical"] is True


# the section, end to end ---------------------------------------------------------------
def test_a_drill_that_only_waits_shares_its_turn_with_one_that_works():
    turns = section._turns(parse_settings({}).specs())
    assert [[spec.key for spec in turn] for turn in turns] == [
        ["hang:timeout", "kill:restart-unshared"],
        ["kill:reconfigure"],
    ]


@pytest.mark.torch_envs
def test_default_drills_share_one_fault_free_run_per_environment_and_are_stored_and_resumed(
    make_context, store
):
    """The section's default drills in one run (its two turns): a killed rank restarted
    from its checkpoint with the same result, a hung rank surfacing as a timeout within the
    timeout (one run checked for all three: the drills are the same), and a rank replaced
    in place in 2.14 that 2.13 has no path for; all three compared with one fault-free run
    per environment, reported, and left alone on resume."""
    faults = ["kill:restart-unshared", "hang:timeout", "kill:reconfigure"]
    # A longer group timeout: the replacement's first collective, on a busy machine.
    timeout_s = 10.0
    settings = section.parse_settings({"faults": faults, **SHORT, "timeout_s": timeout_s})
    ctx = make_context(sections=("drill",), settings={"drill": settings})
    section.run(ctx)
    results = {(r.key, r.env_role): r for r in store.section_results(ctx.run_id, "drill")}
    assert sorted(results) == sorted(
        (key, role) for key in (*faults, "reference:ddp") for role in ("baseline", "candidate")
    )
    for (key, role), result in results.items():
        if (key, role) != ("kill:reconfigure", "baseline"):
            assert result.verdict == "passed", (key, role, result.payload["reason"])
        assert result.payload.get("orphans_after_cleanup", []) == []
    # One fault-free run per environment, made while the other drill of the first turn
    # waited, and reused by the second turn.
    assert len(list(ctx.work_dir.glob("drills/*/reference-ddp-*"))) == 2

    # The killed rank, restarted from its checkpoint with the same result.
    payload = results[("kill:restart-unshared", "baseline")].payload
    # Checkpoint after step 3 (every 4 steps), killed after step 6: steps 4-6 are redone.
    assert payload["last_step_before_fault"] == 6
    assert payload["resume_step"] == 4
    assert payload["steps_lost"] == 3
    assert payload["restarts"] == 1
    assert 0 < payload["detect_s"] < payload["resume_s"]
    assert payload["final_loss"] == payload["reference_loss"]
    assert payload["params_identical"] is True
    assert payload["parallel"] == "ddp"
    # Steps 4-6 ran twice (before the kill and after the restart): each run is checked.
    assert payload["step_check"]["first_differing_step"] is None
    assert payload["step_check"]["steps_compared"] == SHORT["steps"]
    assert [row["step"] for row in payload["step_diffs"] if row["runs"] > 2] == [4, 5, 6]
    # The killed rank never dumps; whether rank 0 dumped before torchrun tore it down is timing.
    assert 1 in payload["flight_recorder"]["missing_ranks"]
    assert payload["orphans_after_cleanup"] == []

    # The hung rank, surfacing as a timeout error within the timeout.
    payload = results[("hang:timeout", "baseline")].payload
    assert "timeout" in payload["error_kinds"]
    assert timeout_s * 0.9 <= payload["detect_s"] <= timeout_s + 5
    # The stopped rank reached the stalled all-reduce only once released: the recorder's
    # timestamps give it away.
    assert payload["flight_recorder"]["suspects"] == [1]

    # The rank replaced in place: absent in 2.13, passed in 2.14.
    baseline = results[("kill:reconfigure", "baseline")]
    candidate = results[("kill:reconfigure", "candidate")]
    assert baseline.verdict == "absent" and "_reconfigure" in baseline.payload["reason"]
    assert baseline.payload["parallel"] == "ddp"  # what was tried, and found no path
    assert candidate.payload["steps_lost"] == 0
    # The user's mode (DDP, the default) ran in place, and is what the result records.
    assert candidate.payload["parallel"] == "ddp"
    assert candidate.payload["restored"].startswith("DDP wrapped again")
    assert candidate.payload["old_wrapper_freed"] is True  # no stale reducer left reducing
    check = candidate.payload["step_check"]
    assert check["steps_compared"] == SHORT["steps"] and check["first_differing_step"] is None

    view = load_run_view(store, ctx.run_id)
    page = report.html(view)
    assert "kill:reconfigure" in page and "<script" not in page
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    for svg in svgs:
        ElementTree.fromstring(svg)  # well-formed, so browsers draw it
    assert len([svg for svg in svgs if 'aria-label="kill:reconfigure' in svg]) == 2
    assert "<td>ddp</td>" in page
    rows = [line for line in report.markdown(view).splitlines() if "kill:reconfigure" in line]
    assert any(line.startswith("- `kill:reconfigure` candidate (ddp): **passed**") for line in rows)
    assert all(len(line) <= 200 for line in report.markdown(view).splitlines())
    ran = {
        (entry["key"], entry["env_role"]): entry["payload"].get("parallel")
        for entry in render_json(view)["sections"]["drill"]
    }
    assert ran[("kill:reconfigure", "candidate")] == "ddp"
    statuses = {c.name: c.status for c in report.junit_cases(view)}
    assert {name: s for name, s in statuses.items() if name.startswith("kill:reconfigure")} == {
        "kill:reconfigure [baseline]": "skipped",
        "kill:reconfigure [candidate]": "passed",
    }
    assert section.blocking_reasons(view, {}) == []

    resumed = replace(ctx, resume=True)
    section.run(resumed)  # everything is stored: nothing runs, nothing changes
    assert len(store.section_results(ctx.run_id, "drill")) == len(results)


@pytest.mark.torch_envs
def test_both_environments_run_each_drill_at_once_and_it_is_stored_from_the_caller(
    make_context, store, monkeypatch
):
    """A barrier only both environments' runs of the same drill can pass together."""
    import threading

    from torchcanary.drill.drill import DrillOutcome
    from torchcanary.drill.result import DrillVerdict

    together = threading.Barrier(2, timeout=60)
    caller = threading.get_ident()
    ran: list[tuple[str, str]] = []

    def run(self: DrillRunner, drill: DrillSpec) -> DrillOutcome:
        assert threading.get_ident() != caller
        together.wait()  # a BrokenBarrierError here: the other environment never came
        ran.append((drill.key, self.python))
        return DrillOutcome(DrillVerdict.PASSED, {"reason": "stand-in", "spec": drill.to_json()})

    monkeypatch.setattr(DrillRunner, "run", run)
    monkeypatch.setattr(DrillRunner, "references", lambda self: [])
    saved: list[int] = []
    original = store.save_section_result
    monkeypatch.setattr(
        store,
        "save_section_result",
        lambda *args: (saved.append(threading.get_ident()), original(*args))[1],
    )
    settings = section.parse_settings({"faults": ["kill:timeout", "hang:timeout"]})
    ctx = make_context(sections=("drill",), settings={"drill": settings})
    section.run(ctx)
    assert len(ran) == 4 and {key for key, _ in ran} == {"kill:timeout", "hang:timeout"}
    assert saved == [caller] * 4  # the store is written from the section's own thread
    verdicts = {(r.key, r.env_role): r.verdict for r in store.section_results(ctx.run_id, "drill")}
    assert set(verdicts.values()) == {"passed"} and len(verdicts) == 4


# bad input and faults of the drill itself ----------------------------------------------
@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"faults": ["explode"]}, "unknown fault 'explode'"),
        ({"faults": ["hang:shrink"]}, "cannot be paired"),
        ({"at_step": 40}, "at_step = 40 is beyond the job's 30 steps"),
        ({"ranks": 9}, "ranks = 9"),
        ({"target_rank": 2}, "target_rank = 2"),
        ({"ranks": True}, "whole number"),
        ({"speed": 1}, "unknown key 'speed'"),
        ({"net_rate": "fast"}, "net_rate"),
    ],
)
def test_bad_settings_are_one_clear_config_error(table, words):
    with pytest.raises(ConfigError, match=None) as caught:
        section.parse_settings(table)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_defaults_are_the_short_drill_set():
    settings = section.parse_settings({})
    assert settings["faults"] == ["kill:restart-unshared", "kill:reconfigure", "hang:timeout"]
    assert section.parse_settings({"faults": "all"})["faults"][0] == "kill:restart"


def test_more_ranks_than_memory_is_not_checkable_without_starting_anything(tmp_path):
    problem = machine_capacity_problem(100_000)
    assert problem is not None and problem.lasting and "lower drill.ranks" in problem.reason
    runner = DrillRunner("/nonexistent/python", tmp_path, tmp_path)
    outcome = runner.run(spec("kill", "restart", ranks=100_000))
    assert outcome.verdict == "not-checkable"
    assert "lower drill.ranks" in outcome.payload["reason"]


def test_missing_ip_makes_network_drills_not_checkable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ip, no tc
    runner = DrillRunner("/nonexistent/python", tmp_path, tmp_path)
    outcome = runner.run(spec("net-slow", "none"))
    assert outcome.verdict == "not-checkable"
    assert "'ip' command" in outcome.payload["reason"]


# the go/no-go policy -------------------------------------------------------------------
def _view(*results: SectionResult) -> SimpleNamespace:
    return SimpleNamespace(sections={"drill": list(results)})


def _result(role: str, verdict: str, **payload: object) -> SectionResult:
    return SectionResult("drill", "kill:restart", role, verdict, {"reason": "r", **payload})


def test_path_that_works_in_baseline_but_fails_in_candidate_blocks():
    reasons = section.blocking_reasons(
        _view(_result("baseline", "passed"), _result("candidate", "failed")), {}
    )
    assert len(reasons) == 1 and "passed in the baseline" in reasons[0]
    assert (
        section.blocking_reasons(
            _view(_result("baseline", "failed"), _result("candidate", "failed")), {}
        )
        == []
    )


def test_wrong_final_result_in_candidate_blocks_even_without_baseline():
    wrong = _result(
        "candidate", "failed", final_loss=4.6, reference_loss=4.5, params_identical=True
    )
    assert "final loss" in section.blocking_reasons(_view(wrong), {})[0]
    diverged = _result("candidate", "failed", params_identical=False)
    assert "different parameters" in section.blocking_reasons(_view(diverged), {})[0]
    assert section.blocking_reasons(_view(wrong), {"drill_block_on_wrong_result": False}) == []


def test_much_slower_recovery_in_candidate_blocks():
    slow = _view(
        _result("baseline", "passed", resume_s=5.0), _result("candidate", "passed", resume_s=40.0)
    )
    assert "resume_s 40.0 s" in section.blocking_reasons(slow, {})[0]
    assert section.blocking_reasons(slow, {"drill_max_slowdown": 10}) == []


def test_orchestrator_side_of_the_drills_never_imports_torch():
    code = (
        "import sys, torchcanary.drill.section, torchcanary.drill.report, "
        "torchcanary.drill.drill; print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(section.__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
