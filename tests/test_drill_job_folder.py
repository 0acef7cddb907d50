"""Issue 42: a team's job drilled as they run it, with its state in its working folder.

Every attempt (each fault-free run, drill and trial, in each environment) starts in its own
mirror of the job's folder, so no attempt resumes from another's checkpoint and the user's
folder is left as it was; an attempt that logged no step, or resumed from state it did not
make, says so with the fix; a failed attempt names its first error from every source it has.
The fixture job (``ckpt_in_cwd.py``) is DDP, logs on rank 0 only and checkpoints to
``ckpt.pt`` in the folder it starts in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from torchcanary.drill import first_errors, job_folder, report, section
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.settings import parse_settings
from torchcanary.drill.user_runner import UserJobRunner
from torchcanary.report.view import load_run_view
from torchcanary.store.rows import SectionResult

pytestmark = pytest.mark.usefixtures("drill_leak_check")

JOBS = Path(__file__).parent / "fixtures" / "drill_jobs"
SHORT = {"at_step": 4, "timeout_s": 5.0, "drill_timeout_s": 90.0}
CONFIG = '{"lr": 0.05, "timeout_s": 5, "step_sleep": 0.1, "ckpt_every": 3}\n'


def _project(tmp_path: Path) -> Path:
    """The team's folder: the script and the config it reads, as they keep them."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(JOBS / "ckpt_in_cwd.py", project / "train.py")
    (project / "config.json").write_text(CONFIG)
    return project


def _digest(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` and its bytes' digest (a folder or link by its name)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            kind = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(folder))] = kind
    return found


# the mirror, without torch --------------------------------------------------------------
def test_an_attempts_folder_mirrors_the_jobs_and_what_it_writes_stays_there(tmp_path):
    project = _project(tmp_path)
    (project / "data").mkdir()
    (project / "data" / "big.bin").write_bytes(b"x" * (job_folder.COPY_LIMIT_BYTES + 1))
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"cached")
    work = project / "runs" / "work"  # torchcanary's work folder, under the job's folder
    work.mkdir(parents=True)
    before = _digest(project)
    target = job_folder.in_attempt(work / "attempt")
    made = job_folder.mirror(project, target)
    assert sorted(made) == ["config.json", "data/big.bin", "train.py"]
    assert (target / "config.json").read_text() == CONFIG and not (target / "train.py").is_symlink()
    assert (target / "data" / "big.bin").is_symlink()  # data is linked, not copied per attempt
    # The job writes its checkpoint, rewrites its config and adds a folder: all in the mirror.
    (target / "ckpt.pt").write_bytes(b"state")
    (target / "config.json").write_text("{}")
    (target / "out").mkdir()
    (target / "out" / "log.txt").write_text("ran")
    left = job_folder.left_behind(made, target)
    assert left == {"created": ["ckpt.pt", "out/log.txt"], "changed": ["config.json"]}
    assert job_folder.describe(left) == "created ckpt.pt, out/log.txt; changed config.json"
    after = _digest(project)
    assert {k: v for k, v in after.items() if not k.startswith("runs/work/attempt")} == before


def test_first_errors_come_from_every_source_and_name_whose_cause_it_is(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "torchrun.log").write_text(
        "[rank2]: RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:129] Timed out waiting 10000ms for send operation to complete\n"
        "RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/third_party/gloo/"
        "pair.cc:152] timed out connecting: SO_ERROR: Connection refused\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-06_04:13:04\n"
        "  rank      : 2 (local_rank: 2)\n  exitcode  : 1 (pid: 8787)\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic\n"
    )
    found = first_errors.collect([], 1.0, logs)
    assert found == {
        "launch_log": [
            "rank 2: RuntimeError: Timed out waiting 10000ms for send operation to complete",
            "RuntimeError: Gloo connectFullMesh failed with timed out connecting: SO_ERROR: "
            "Connection refused",
        ],
        "root_cause": "rank 2 (local_rank: 2) exited with 1 (pid: 8787)",
    }
    assert first_errors.first(found) == found["launch_log"][0]
    assert first_errors.cause(found, "restart").startswith("torch's: torchrun shares its")
    assert first_errors.cause(found, "restart-unshared") == (
        "torch's: the error was raised inside torch.distributed"
    )
    events = [{"ev": "error", "t": 2.0, "rank": 1, "error": "ValueError: bad batch"}]
    assert first_errors.first(first_errors.collect(events, 1.0, tmp_path)) == (
        "rank 1: ValueError: bad batch"
    )


def test_a_rank_aborted_by_an_escaped_cpp_exception_is_named_from_the_log(tmp_path):
    (tmp_path / "torchrun.log").write_text(
        "[rank1]: terminate called without an active exception\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    found = first_errors.collect([], None, tmp_path)
    assert found == {"launch_log": ["rank 1: terminate called without an active exception"]}


def test_a_drill_failing_in_both_versions_names_whose_cause_it_is_in_the_summary():
    shared = first_errors.KNOWN_CAUSES[0][2]
    rows = [
        SectionResult("drill", "kill:restart", role, "failed", {"reason": "r", "cause": shared})
        for role in ("baseline", "candidate")
    ]
    summary = report.markdown(SimpleNamespace(sections={"drill": rows}, reproducers={}))
    assert f"- `kill:restart` failed in both versions; the cause: {shared}" in summary
    html = report.html(SimpleNamespace(sections={"drill": rows}, reproducers={}))
    assert "<p>This drill failed in both versions; the cause: torch&#x27;s: torchrun" in html
    rows[0] = SectionResult("drill", "kill:restart", "baseline", "passed", {"reason": "r"})
    summary = report.markdown(SimpleNamespace(sections={"drill": rows}, reproducers={}))
    assert "failed in both versions" not in summary


# the job as its authors run it, under real torchrun --------------------------------------
@pytest.mark.torch_envs
def test_job_that_checkpoints_in_its_folder_is_drilled_in_both_versions_and_its_folder_kept(
    make_context, store, tmp_path, monkeypatch
):
    """Both environments run each drill at the same time (``test_drill.py`` pins that), in
    one job folder: every attempt starts at step 0 in its own copy, so none sees another's
    checkpoint; every drill has a verdict; the folder is byte-identical afterwards."""
    project = _project(tmp_path)
    before = _digest(project)
    faults = ["kill:restart-unshared", "hang:timeout", "kill-in-backward:restart-unshared"]
    parsed = section.parse_settings(
        {"job": "train.py --steps 10", "job_cwd": str(project), "faults": faults, **SHORT}
    )
    ctx = make_context(sections=("drill",), settings={"drill": parsed})
    section.run(ctx)
    results = {(r.key, r.env_role): r for r in store.section_results(ctx.run_id, "drill")}
    assert _digest(project) == before
    for role in ("baseline", "candidate"):
        reference = results[("reference:job", role)].payload
        assert reference["started_at_step"] == 0 and reference["final_step"] == 9
        assert reference["left_in_folder"] == {"created": ["ckpt.pt"], "changed": []}
        for key in faults:
            payload: dict[str, Any] = results[(key, role)].payload
            assert results[(key, role)].verdict == "passed", (key, role, payload["reason"])
            assert payload["started_at_step"] == 0 and payload["steps_logged_by"] == [0]
            assert payload["struck_rank"] == 1
            assert payload["left_in_folder"]["created"] == ["ckpt.pt"]
        backward = results[("kill-in-backward:restart-unshared", role)].payload
        assert backward["struck_in_backward_of_step"] in (5, 6)  # the step after rank 0's 4th
        assert backward["step_check"]["steps_compared"] == 10
    view = load_run_view(store, ctx.run_id)
    assert "wrote in its folder: created ckpt.pt (every attempt starts" in report.markdown(view)
    assert "wrote in its folder: created ckpt.pt</td>" in report.html(view)


@pytest.mark.torch_envs
def test_attempt_resuming_from_state_it_did_not_make_is_named_with_the_fix(
    baseline_env, import_root, tmp_path
):
    """A checkpoint path outside the folder and ``{scratch}``: the fault-free run leaves it
    finished for the drill, which then logs no step (or starts past the reference's)."""
    project = _project(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    spec = DrillSpec("kill", "restart-unshared", **SHORT)  # type: ignore[arg-type]
    reasons = {}
    for steps in (9, 10):  # saved every 3 steps: after the last one, or one before it
        job = parse_settings(
            {
                "job": f"train.py --steps {steps} --ckpt {outside}/{steps}.pt",
                "job_cwd": str(project),
            }
        ).user_job()
        assert job is not None
        runner = UserJobRunner(
            baseline_env.python, baseline_env.path, import_root, tmp_path / f"work{steps}", job
        )
        outcome = runner.run(spec)
        assert outcome.verdict == "error"
        reasons[steps] = outcome.payload["reason"]
    assert reasons[9].startswith("the job logged no step, so no fault was injected: it exited ")
    assert "with codes {'main0': 0} after " in reasons[9]
    assert reasons[9].endswith("give its checkpoint path as {scratch}/...)")
    assert reasons[10].startswith(
        "the job started at step 9, not at step 0 as its fault-free run did, with no fault "
        "injected: it resumed from state it did not make"
    )
