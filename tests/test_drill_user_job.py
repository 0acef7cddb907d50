"""Drills on the team's own job: a script we did not write, launched as they launch it.

The contract first, without torch (the helper and the shim are plain Python); then fixture
jobs under real torchrun and gloo: a DDP job with its own DCP checkpoints reporting through
the helper (both versions), one that only prints its steps, one that ignores SIGTERM and
leaves a child behind, one that cannot start. Every test checks nothing is left running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

import pytest

from torchcanary.drill import job_compare, job_exits, kept_references, plugin, report, section
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.job_injectors import timed_strike_s
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.settings import parse_settings
from torchcanary.drill.user_job import DEFAULT_STEP_PATTERN, UserJob
from torchcanary.drill.user_runner import UserJobRunner
from torchcanary.errors import ConfigError
from torchcanary.report.view import load_run_view
from torchcanary.store.rows import SectionResult
from torchcanary.worker.calls import DRILL_USER_JOB
from torchcanary.worker.drill import job_inplace

pytestmark = pytest.mark.usefixtures("drill_leak_check")

JOBS = Path(__file__).parent / "fixtures" / "drill_jobs"
SRC = Path(__file__).parents[1] / "src"
SHORT = {"at_step": 4, "timeout_s": 5.0, "drill_timeout_s": 90.0}


def _drill_job(
    make_context: Any, store: Any, job: str, faults: list[str], **settings: Any
) -> tuple[Any, dict[tuple[str, str], Any]]:
    """Drill ``job`` with ``faults`` in both environments (short settings): the run's
    context and its drill rows by (key, role)."""
    parsed = section.parse_settings({"job": job, "faults": faults, **SHORT, **settings})
    ctx = make_context(sections=("drill",), settings={"drill": parsed})
    section.run(ctx)
    return ctx, {(r.key, r.env_role): r for r in store.section_results(ctx.run_id, "drill")}


def _shim(tmp_path: Path, script: str, events: bool = True) -> tuple[int, list[dict]]:
    """Run ``script`` through the shim (no torchrun, no torch); its exit code and events."""
    path = tmp_path / "job.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TORCHCANARY_DRILL_EVENTS", None)
    if events:
        env["TORCHCANARY_DRILL_EVENTS"] = str(tmp_path / "events")
        env["TORCHCANARY_DRILL_STEP_PATTERN"] = DEFAULT_STEP_PATTERN
    done = subprocess.run(
        [sys.executable, "-m", DRILL_USER_JOB, str(path), "--flag", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [
        json.loads(line)
        for log in sorted((tmp_path / "events").glob("*.jsonl"))
        for line in log.read_text().splitlines()
    ]
    return done.returncode, lines


# the contract, without torch -------------------------------------------------------------
def test_report_step_does_nothing_outside_a_drill(tmp_path):
    code, events = _shim(
        tmp_path,
        "import sys\nfrom torchcanary.drill import report_step\n"
        "assert sys.argv[1:] == ['--flag', 'x']\nreport_step(3, loss=0.5)\n",
        events=False,
    )
    assert code == 0
    assert events == []
    assert not (tmp_path / "events").exists()


def test_a_shrinks_fault_free_run_tells_the_job_who_leaves_after_which_step(tmp_path, monkeypatch):
    """Issue 28 item 5: the variables a shrink's in-place reference is started with."""
    monkeypatch.setenv(job_inplace.RECOVERY_VARIABLE, "shrink")
    monkeypatch.setenv(job_inplace.STORE_VARIABLE, "127.0.0.1:29400")
    monkeypatch.setenv(job_inplace.LEAVE_VARIABLE, "4:1,2")
    code, events = _shim(
        tmp_path,
        "from torchcanary.drill import in_place_drill\n"
        "d = in_place_drill()\n"
        "assert (d.recovery, d.store_port, d.join_generation) == ('shrink', 29400, None), d\n"
        "assert (d.leave_after_step, d.leaving) == (4, (1, 2)), d\n",
    )
    assert code == 0
    assert [e["leave_after_step"] for e in events if e["ev"] == "in_place"] == [4]


def test_printed_step_lines_are_steps_until_the_job_reports_its_own(tmp_path):
    code, events = _shim(
        tmp_path,
        "from torchcanary.drill import report_step\n"
        "print('epoch 0 step 1 | loss 0.75')\n"
        "print('nothing to see')\n"
        "report_step(2, loss=0.5, lr=0.1)\n"
        "print('step 3 loss 0.25')\n",
    )
    assert code == 0
    steps = [(e["step"], e["loss"], e["source"]) for e in events if e["ev"] == "step"]
    assert steps == [(1, 0.75, "log"), (2, 0.5, "helper")]  # step 3's line: the job reports
    assert [e["ev"] for e in events][:2] == ["launch", "start"]
    # "exit": the shim let the job's process group go after its last step (issue 28 item 3)
    assert [e["ev"] for e in events][-2:] == ["done", "exit"]
    assert job_compare.step_source(events) == "report_step"


def test_an_exception_escaping_the_job_is_recorded_in_one_line_and_still_fails_it(tmp_path):
    code, events = _shim(tmp_path, "raise FileNotFoundError('config small.yaml not found')\n")
    assert code == 1
    errors = [e for e in events if e["ev"] == "error"]
    assert [e["error"] for e in errors] == ["FileNotFoundError: config small.yaml not found"]


# What torchrun printed when rank 1 of a fault-free run (torch 2.14.1) died after its last step.
TORCHRUN_ABORT = """terminate called without an active exception
W1204 05:22:24 api.py:1028] Sending process 29110 closing signal SIGTERM
E1204 05:22:24 api.py:1002] failed (exitcode: -6) local_rank: 1 (pid: 29111) of binary: python
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 29110)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 29111)  (SIGABRT)
  error_file: <N/A>
"""


def test_a_rank_killed_by_a_signal_is_named_with_its_last_words_and_when_it_died():
    launches = [
        {"ev": "launch", "rank": 0, "pid": 29110, "attempt": 1},
        {"ev": "launch", "rank": 1, "pid": 29111, "attempt": 1},
    ]
    done = [*launches, {"ev": "done", "rank": 1, "pid": 29111}]
    # rank 1's own death, not the SIGTERM torchrun then sends rank 0 on its way out
    [death] = job_exits.torchrun_deaths(TORCHRUN_ABORT, done)
    assert (death.attempt, death.after_done) == (1, True)
    assert death.describe() == (
        "rank 1 was killed by SIGABRT after its last step, on its way out "
        "(terminate called without an active exception)"
    )
    [early] = job_exits.torchrun_deaths(TORCHRUN_ABORT, launches)
    assert not early.after_done and "while it ran" in early.describe()
    exited = TORCHRUN_ABORT.replace("exitcode: -6", "exitcode: 1")
    assert job_exits.torchrun_deaths(exited, done) == []  # an exit code, not a signal
    plain = job_exits.process_death(0, -11, "Fatal Python error: Segmentation fault\n", [])
    assert plain is not None and plain.describe() == (
        "rank 0 was killed by SIGSEGV while it ran (Fatal Python error: Segmentation fault)"
    )
    assert job_exits.process_death(0, 1, "", []) is None


def test_a_job_without_steps_is_struck_within_the_drills_bound_even_after_a_slow_reference():
    """Half the fault-free run, unless that run outlasted the drill's bound (a loaded
    machine): then half the bound, or the strike would come after the drill ended."""
    assert timed_strike_s(None, 10.0, drill_timeout_s=60.0) == 5.0
    assert timed_strike_s(None, 30.0, drill_timeout_s=12.0) == 6.0
    assert timed_strike_s(2.5, 30.0, drill_timeout_s=12.0) == 2.5  # the user's own time


def test_job_settings_name_the_problem_and_the_fix():
    script = str(JOBS / "ddp_dcp.py")
    settings = {"job": f"{script} --ckpt-dir {{scratch}}/ck"}
    assert parse_settings(settings).user_job() is not None
    assert parse_settings({}).user_job() is None
    with pytest.raises(ConfigError, match="not the launcher"):
        section.parse_settings({"job": f"torchrun --nproc-per-node 2 {script}"})
    with pytest.raises(ConfigError, match=r"'missing\.py' not found"):
        section.parse_settings({"job": "missing.py --config small.yaml"})
    with pytest.raises(ConfigError, match=r"no \(\?P<step>"):
        section.parse_settings({"job": script, "job_step_pattern": r"iter (\d+)"})
    with pytest.raises(
        ConfigError,
        match="job_rtol: expected a number above 0, got -1",
    ):
        section.parse_settings({"job": script, "job_rtol": -1})
    with pytest.raises(ConfigError, match=r"unknown key 'jobs'.*job_with"):
        section.parse_settings({"jobs": script})


def test_drill_command_takes_the_job_its_requirements_and_ranks():
    parser = ArgumentParser()
    plugin.add_flags(parser, own_command=True)
    args = parser.parse_args(
        ["--job", "train.py --config small.yaml", "--with", "-e .", "--nproc", "3"]
    )
    assert plugin.flag_settings(args) == {
        "job": "train.py --config small.yaml",
        "job_with": ["-e ."],
        "ranks": 3,
    }
    args = parser.parse_args(
        ["--job-cwd", "proj", "--job-env", "SEED=1", "--job-env", "A=b=c", "--fresh-reference"]
    )
    assert plugin.flag_settings(args) == {
        "job_cwd": "proj",
        "job_env": ["SEED=1", "A=b=c"],
        "job_fresh_reference": True,
    }


def test_job_cwd_and_env_are_checked_and_paths_read_from_the_jobs_folder(tmp_path):
    (tmp_path / "train.py").write_text("")
    settings = parse_settings(
        {"job": "train.py --lr 1", "job_cwd": str(tmp_path), "job_env": ["SEED=1", "X=a=b"]}
    )
    assert settings.job_cwd == str(tmp_path.resolve())
    assert settings.job_env == {"SEED": "1", "X": "a=b"}
    job = settings.user_job()
    assert job is not None and job.cwd == str(tmp_path.resolve())
    assert section.parse_settings(
        {"job": "train.py", "job_cwd": str(tmp_path), "job_env": {"N": 2}}
    )["job_env"] == {"N": "2"}
    problems = {
        "is not a folder": {"job_cwd": str(tmp_path / "nowhere")},
        "'FOO' is not KEY=VALUE": {"job_env": ["FOO"]},
        "RANK is set by the drill": {"job_env": {"RANK": "3"}},
        "TORCHCANARY_DRILL_EVENTS is set by the drill": {"job_env": ["TORCHCANARY_DRILL_EVENTS=x"]},
        "'1X' is not a variable name": {"job_env": {"1X": "a"}},
        "give a table of variables": {"job_env": "SEED=1"},
        "SEED = True: give a string or a number": {"job_env": {"SEED": True}},
        "job_fresh_reference: expected true or false, got 'yes'": {"job_fresh_reference": "yes"},
    }
    for message, keys in problems.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            section.parse_settings({"job": "train.py", "job_cwd": str(tmp_path), **keys})
    # The script is looked for in job_cwd, not where torchcanary runs.
    with pytest.raises(ConfigError, match=r"job script 'train\.py' not found"):
        section.parse_settings({"job": "train.py"})


def _job(tmp_path: Path, **keys: object) -> UserJob:
    job = parse_settings({"job": "train.py --config job.cfg", **keys}).user_job()
    assert job is not None
    return job


def test_reference_key_changes_with_everything_the_fault_free_run_depends_on(tmp_path):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("print('step 0 loss 1')\n")
    (project / "job.cfg").write_text("steps=5")
    (project / "pkg" / "model.py").write_text("WIDTH = 8\n")
    (project / "pkg" / "__pycache__").mkdir()
    base = {"job_cwd": str(project), "job_with": ["-e ."], "job_env": {"SEED": "1"}}

    def key(job: UserJob, environment: str = "env-a", ranks: int = 2) -> str:
        return kept_references.reference_key(job.identity(environment, ranks))

    first = key(_job(tmp_path, **base))
    assert key(_job(tmp_path, **base)) == first
    # A fresh scratch folder per run is not a change: the key reads the job as written.
    scratch = {**base, "job": "train.py --config job.cfg --ckpt {scratch}/c"}
    assert key(_job(tmp_path, **scratch)) == key(_job(tmp_path, **scratch))
    (project / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert key(_job(tmp_path, **base)) == first  # build output is not the job's source
    changed = {
        "environment": key(_job(tmp_path, **base), environment="env-b"),
        "ranks": key(_job(tmp_path, **base), ranks=3),
        "env": key(_job(tmp_path, **{**base, "job_env": {"SEED": "2"}})),
        "arguments": key(_job(tmp_path, **{**base, "job": "train.py --config job.cfg --lr 2"})),
        "tolerance": key(_job(tmp_path, **{**base, "job_rtol": 0.1})),
        "pattern": key(_job(tmp_path, **{**base, "job_step_pattern": r"it (?P<step>\d+)"})),
        "with": key(_job(tmp_path, **{**base, "job_with": []})),
    }
    assert first not in changed.values() and len(set(changed.values())) == len(changed)
    for path, text in (("job.cfg", "steps=6"), ("train.py", "#\n"), ("pkg/model.py", "W = 9")):
        before = key(_job(tmp_path, **base))
        (project / path).write_text(text)
        assert key(_job(tmp_path, **base)) != before, f"{path} changed but the key did not"


def test_unreadable_or_foreign_cache_entry_is_ignored_with_one_warning(tmp_path):
    warnings: list[str] = []
    cache = KeptReferences(tmp_path / "cache", warnings.append)
    reference = {"ok": True, "final_step": 4, "steps": [[0, 0, 1.0]]}
    cache.save("k1", reference, {"job": "train.py"})
    loaded = cache.load("k1")
    assert loaded is not None and loaded["final_step"] == 4 and loaded["cached"]["age_s"] >= 0
    cache.save("failed", {"ok": False, "reason": "exit 1"}, {})  # a failing run is not kept
    assert cache.load("failed") is None and not cache.path("failed").exists()
    cache.path("k2").write_text("{not json")
    cache.path("k3").write_text(cache.path("k1").read_text())  # another key's entry
    assert cache.load("k2") is None and cache.load("k3") is None
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert warnings[0].startswith(f"ignoring the cached fault-free run {cache.path('k2')}")
    assert "making it again" in warnings[1] and "another key" in warnings[1]
    assert list(cache.directory.glob("*.partial")) == []


# fixture jobs under real torchrun ----------------------------------------------------------
@pytest.mark.torch_envs
def test_ddp_job_with_its_own_checkpoints_restarts_and_ends_where_its_fault_free_run_ends(
    make_context, store, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))  # the environments are built
    job = f"{JOBS / 'ddp_dcp.py'} --steps 10 --ckpt-every 3 --ckpt-dir {{scratch}}/ckpt"
    ctx, results = _drill_job(make_context, store, job, ["kill:restart-unshared"])
    for role in ("baseline", "candidate"):
        drill = results[("kill:restart-unshared", role)]
        payload = drill.payload
        assert drill.verdict == "passed", payload["reason"]
        assert payload["step_source"] == "report_step" and payload["fault_at"] == "step"
        # Its checkpoint after step 2, the kill after step 4: torchrun restarts it at step 3.
        assert payload["last_step_before_fault"] == 4
        assert payload["resume_step"] == 3 and payload["steps_lost"] == 2
        # One restart, for the fault. torchrun restarts once more only for a rank that died
        # after its last step: a gloo worker thread of torch (2.13 and 2.14 alike) that drops
        # its last work during interpreter shutdown aborts the process. The drill says so.
        extra = [d for d in payload["signal_deaths"] if d["attempt"] < payload["restarts"]]
        assert payload["restarts"] == 1 + len(extra), payload["signal_deaths"]
        for death in extra:
            assert death["after_done"] and death["signal"] == "SIGABRT" and death["message"]
            assert (
                f"({len(extra)} of them after rank {death['rank']} was killed"
                in (payload["reason"])
            )
        # The survivor sees its peer lost, unless torchrun stops it before its next
        # collective (a race a loaded machine can tip either way): nothing else, though.
        assert set(payload["error_kinds"]) <= {"peer-lost"}
        assert payload["job_errors_before_fault"] == []
        assert payload["final_step"] == 9 and payload["final_loss"] == payload["reference_loss"]
        assert payload["step_check"]["steps_compared"] == 10
        assert "deterministic job" in payload["reason"]
        # Issue 28 item 3: its gloo group, which the DDP wrapper keeps past
        # destroy_process_group(), is freed (its threads joined) before interpreter exit.
        assert sorted(payload["threads_at_exit"]) == ["rank0", "rank1"]
        left = [n for names in payload["threads_at_exit"].values() for n in names if "gloo" in n]
        assert left == [], payload["threads_at_exit"]
        assert payload["orphans_after_cleanup"] == []
        reference = results[("reference:job", role)]
        assert reference.verdict == "passed" and reference.payload["final_step"] == 9
        assert "cached" not in reference.payload  # made in this run, and kept for the next
    assert len(list((tmp_path / "cache" / "drill-references").glob("*.json"))) == 2
    view = load_run_view(store, ctx.run_id)
    assert section.blocking_reasons(view, {}) == []
    assert "`kill:restart-unshared` candidate (job): **passed**" in report.markdown(view)
    assert "ran on your job, <code>" in report.html(view)


@pytest.mark.torch_envs
def test_job_that_logs_on_rank_0_only_is_struck_on_rank_1_and_compared_at_every_step(
    make_context, store, tmp_path, monkeypatch
):
    """Issue 28 item 1: a DDP job that prints its steps on rank 0 only and saves with
    torch.save is struck after the asked step on the asked rank, in both environments."""
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))  # the environments are built
    job = f"{JOBS / 'logs_on_rank0.py'} --steps 8 --ckpt-every 3 --ckpt-dir {{scratch}}/ckpt"
    _, results = _drill_job(make_context, store, job, ["kill:restart-unshared"])
    for role in ("baseline", "candidate"):
        drill = results[("kill:restart-unshared", role)]
        payload = drill.payload
        assert drill.verdict == "passed", payload["reason"]
        assert payload["step_source"] == "log lines" and payload["steps_logged_by"] == [0]
        assert payload["fault_at"] == "step" and payload["struck_rank"] == 1
        assert payload["injected"].startswith("SIGKILL to rank 1 ")
        # Struck once rank 0 logged step 4; its checkpoint after step 2 is where it resumes.
        assert payload["last_step_before_fault"] == 4 and payload["resume_step"] == 3
        assert payload["detect_s"] is not None
        assert payload["step_check"]["steps_compared"] == 8  # every step, 0 to 7
        assert payload["step_check"]["steps_missing"] == []
        assert payload["final_step"] == 7 and payload["final_loss"] == payload["reference_loss"]
        assert payload["orphans_after_cleanup"] == []


@pytest.mark.torch_envs
def test_job_that_crashes_after_its_last_step_is_judged_by_every_step_and_the_crash_reported(
    baseline_env, import_root, tmp_path
):
    """Issue 28 item 3: a rank that aborts on its way out, after its script returned, fails
    neither the fault-free run nor the drill: both are judged by every step they ran, and
    the crash is reported as teardown trouble with its rank, signal and last words."""
    job = parse_settings(
        {
            "job": f"{JOBS / 'logs_on_rank0.py'} --steps 8 --ckpt-every 3 "
            "--ckpt-dir {scratch}/ckpt --abort-at-exit 1"
        }
    ).user_job()
    assert job is not None
    runner = UserJobRunner(baseline_env.python, baseline_env.path, import_root, tmp_path, job)
    spec = DrillSpec("kill", "restart-unshared", **SHORT)  # type: ignore[arg-type]
    reference = runner.reference(spec)
    assert reference["ok"] and reference["tries"] == 1, reference["reason"]
    assert reference["final_step"] == 7 and len(reference["steps"]) == 8
    [trouble] = reference["teardown_trouble"]
    assert (trouble["rank"], trouble["signal"], trouble["after_done"]) == (1, "SIGABRT", True)
    assert trouble["message"] == "Fatal Python error: Aborted"
    assert reference["reason"] == (
        "fault-free: every rank ran to its end; teardown trouble (not a failure: every step "
        "ran): rank 1 was killed by SIGABRT after its last step, on its way out (Fatal Python "
        "error: Aborted)"
    )
    outcome = runner.run(spec)
    payload = outcome.payload
    assert outcome.verdict == "passed", payload["reason"]
    assert payload["ran_to_end"] and payload["final_step"] == 7
    assert payload["step_check"]["steps_compared"] == 8
    assert payload["final_loss"] == payload["reference_loss"]
    # Each launch that ran to the end aborted on its way out, and torchrun restarted it for
    # that too, up to its limit: the last launch's crash is the run's teardown trouble.
    assert [(d["rank"], d["signal"]) for d in payload["teardown_trouble"]] == [(1, "SIGABRT")]
    assert payload["teardown_trouble"][0]["attempt"] == payload["restarts"]
    assert (
        "; teardown trouble (not a failure: every step ran): rank 1 was killed"
        in (payload["reason"])
    )
    assert payload["reference"]["teardown_trouble"] == reference["teardown_trouble"]
    assert payload["orphans_after_cleanup"] == []


@pytest.mark.torch_envs
def test_job_that_only_prints_its_steps_is_compared_within_the_users_tolerance(
    baseline_env, import_root, tmp_path
):
    # It needs the team's own package, installed with --with over the torch environment.
    project = tmp_path / "project"
    shutil.copytree(Path(__file__).parent / "fixtures" / "stack_project", project)
    settings = parse_settings(
        {
            "job": f"{JOBS / 'print_steps.py'} --steps 10 --noise 0.01 --import stackdemo",
            "job_rtol": 0.1,
            "job_with": [str(project)],
        }
    )
    job = settings.user_job()
    assert job is not None
    runner = UserJobRunner(
        baseline_env.python, baseline_env.path, import_root, tmp_path / "work", job
    )
    outcome = runner.run(DrillSpec("kill", "restart-unshared", **SHORT))  # type: ignore[arg-type]
    payload = outcome.payload
    assert outcome.verdict == "passed", payload["reason"]
    assert payload["step_source"] == "log lines" and payload["fault_at"] == "step"
    assert runner.python.endswith("overlay/bin/python")  # the job ran where stackdemo is
    assert payload["last_step_before_fault"] == 4
    assert payload["resume_step"] == 0  # no checkpoints: it starts over, and still ends right
    assert (
        "non-deterministic job, within the tolerance you set (job_rtol 0.1)" in (payload["reason"])
    )
    assert 0 < payload["step_check"]["max_loss_rdiff"] <= 0.1


@pytest.mark.torch_envs
def test_job_that_ignores_sigterm_and_leaves_a_child_is_struck_by_time_and_cleaned_up(
    baseline_env, import_root, tmp_path
):
    job = parse_settings({"job": str(JOBS / "ignores_sigterm.py")}).user_job()
    assert job is not None
    runner = UserJobRunner(baseline_env.python, baseline_env.path, import_root, tmp_path, job)
    outcome = runner.run(DrillSpec("hang", "timeout", **{**SHORT, "drill_timeout_s": 12.0}))  # type: ignore[arg-type]
    payload = outcome.payload
    # No steps to see, so the fault came by time; no timeout on its group, so it never noticed.
    assert payload.get("fault_at") == "time", payload["reason"]
    assert payload["step_source"] is None
    assert outcome.verdict == "failed"
    assert payload["reason"].startswith("hang never surfaced in the job within 12 s")
    assert payload["bounded_out"] is True
    # torchrun, two ranks and the detached children they got to start, all ignoring SIGTERM
    # (the stopped rank may be struck before it starts its own): all killed.
    assert payload["killed_at_cleanup"] >= 4
    assert payload["final_loss"] is None and "step_check" not in payload  # it never ended
    assert payload["orphans_after_cleanup"] == []


@pytest.mark.torch_envs
def test_job_that_cannot_start_is_one_clear_error_and_is_run_once(
    baseline_env, import_root, tmp_path
):
    job = parse_settings({"job": str(JOBS / "crashes_at_start.py")}).user_job()
    assert job is not None
    runner = UserJobRunner(baseline_env.python, baseline_env.path, import_root, tmp_path, job)
    outcomes = [
        runner.run(DrillSpec(f, r, **SHORT)) for f, r in (("kill", "restart"), ("hang", "timeout"))
    ]  # type: ignore[arg-type]
    reason = (
        "the job fails without any fault (exit code 1): rank 0: "
        "FileNotFoundError: config small.yaml not found"
    )
    assert [(o.verdict, o.payload["reason"]) for o in outcomes] == [("error", reason)] * 2
    assert len(runner.references()) == 1  # the fault-free run is made once per environment


@pytest.mark.torch_envs
def test_fault_free_run_is_cached_on_disk_reused_by_a_later_run_and_made_again_on_request(
    baseline_env, import_root, tmp_path, make_context, store
):
    # The job reads a file relative to the folder it starts in, and a variable it is given.
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(JOBS / "reads_cwd_and_env.py", project / "train.py")
    (project / "job.cfg").write_text("steps=5")
    cache = KeptReferences(tmp_path / "cache")
    work = tmp_path / "work"
    spec = DrillSpec("kill", "restart", **SHORT)  # type: ignore[arg-type]

    def runner(fresh: bool = False) -> UserJobRunner:
        job = _job(tmp_path, job_cwd=str(project), job_env={"FIXTURE_LOSS_SCALE": "2"})
        return UserJobRunner(
            baseline_env.python, baseline_env.path, import_root, work, job, cache, "env", fresh
        )

    def reference(fresh: bool = False) -> dict:
        return runner(fresh).reference(spec)

    def runs_made() -> int:
        return len(list(work.glob("reference-job-*")))

    first = reference()
    assert first["ok"], first.get("reason")
    assert (first["final_step"], first["final_loss"]) == (4, 0.4)  # steps=5, scale 2 / 5
    assert "cached" not in first and runs_made() == 1
    again = reference()  # a later run: no torchrun started, the same steps
    assert runs_made() == 1
    assert again["cached"]["age_s"] >= 0 and again["steps"] == first["steps"]
    assert again["reason"].startswith("reused from the cache: made ")
    ctx = make_context(sections=("drill",))  # the report says which reference was reused
    store.save_section_result(
        ctx.run_id, SectionResult("drill", "reference:job", "baseline", "passed", again)
    )
    assert "- your job's fault-free run in the baseline: reused from the cache, made " in (
        report.markdown(load_run_view(store, ctx.run_id))
    )
    (project / "job.cfg").write_text("steps=6")  # the job's file changed: made again
    changed = reference()
    assert runs_made() == 2 and "cached" not in changed and changed["final_step"] == 5
    made_at = json.loads(next(cache.directory.glob("*.json")).read_text())["made_at"]
    refreshed = reference(fresh=True)  # --fresh-reference: made again, and replaces it
    assert runs_made() == 3 and "cached" not in refreshed and refreshed["final_step"] == 5
    entries = [json.loads(p.read_text()) for p in cache.directory.glob("*.json")]
    assert len(entries) == 2 and max(e["made_at"] for e in entries) > made_at
    # A job that does not take part in in-place recovery: that path is absent, and says why.
    in_place = runner().run(DrillSpec("kill", "reconfigure", **SHORT))  # type: ignore[arg-type]
    assert runs_made() == 3  # the cached reference served the drill
    assert (
        in_place.verdict == "absent"
        and "never called torchcanary.drill.in_place_drill()" in (in_place.payload["reason"])
    )
    # Its shrink is absent already from its fault-free run (made in place): never struck.
    shrink = runner().run(DrillSpec("kill", "shrink", **SHORT))  # type: ignore[arg-type]
    assert shrink.verdict == "absent" and "injected" not in shrink.payload
    assert "never called torchcanary.drill.in_place_drill()" in shrink.payload["reason"]
    assert runs_made() == 4  # the shrinking reference is its own run


@pytest.mark.torch_envs
def test_job_that_reconfigures_in_place_recovers_in_2_14_and_is_absent_in_2_13(
    make_context, store, tmp_path, monkeypatch
):
    """Issue 28 item 4: 2.14.1 must pass kill:reconfigure; a rank that crashes on its way
    out after its last step is teardown trouble reported beside the pass, not a failure."""
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))  # the environments are built
    job = f"{JOBS / 'reconfigures_in_place.py'} --steps 10"
    _, results = _drill_job(make_context, store, job, ["kill:reconfigure"])
    baseline = results[("kill:reconfigure", "baseline")]
    assert baseline.verdict == "absent", baseline.payload["reason"]
    assert baseline.payload["reason"].startswith(
        "your job cannot reconfigure: torch 2.13.0+cpu has no torch.distributed._reconfigure"
    )
    candidate = results[("kill:reconfigure", "candidate")]
    payload = candidate.payload
    assert "in_place" in payload, (candidate.verdict, payload.get("reason"))
    assert candidate.verdict == "passed", payload["reason"]
    for death in payload["teardown_trouble"]:  # named in the reason, with its evidence
        assert death["after_done"] and death["said"] in payload["reason"]
    assert payload["reason"].startswith("reconfigure done in place; ended at step 9")
    assert payload["in_place"]["opted_in"] and payload["in_place"]["dead"] == [1]
    assert payload["in_place"]["replacements"] == 1
    assert payload["in_place"]["recovered"][0]["resume_step"] == 5
    assert payload["step_check"]["steps_compared"] == 10 and payload["restarts"] == 0
    assert payload["exit_codes"]["main1"] != 0
    assert payload["exit_codes"]["replacement1.1"] == 0 or any(
        death["rank"] == 1 for death in payload["teardown_trouble"]
    )
    assert payload["orphans_after_cleanup"] == []


@pytest.mark.torch_envs
def test_rank_killed_inside_its_backward_pass_is_reconfigured_in_place_and_matches_every_step(
    candidate_env, import_root, tmp_path
):
    """Issue 28 item 5: the in-place path drilled at the other moment: the rank dies inside
    loss.backward() (its peer in that step's gradient all-reduce), not between steps."""
    job = parse_settings({"job": f"{JOBS / 'reconfigures_in_place.py'} --steps 10"}).user_job()
    assert job is not None
    runner = UserJobRunner(candidate_env.python, candidate_env.path, import_root, tmp_path, job)
    outcome = runner.run(DrillSpec("kill-in-backward", "reconfigure", **SHORT))  # type: ignore[arg-type]
    payload = outcome.payload
    assert outcome.verdict == "passed", payload["reason"]
    assert payload["struck_in_backward_of_step"] == 5  # after step 4, inside step 5
    assert payload["injected"].endswith("inside its backward pass")
    assert payload["in_place"]["dead"] == [1] and payload["in_place"]["replacements"] == 1
    assert payload["in_place"]["recovered"][0]["resume_step"] == 5  # step 5 is redone whole
    assert (
        payload["step_check"]["steps_compared"] == 10
        and payload["step_check"]["steps_missing"] == []
    )
    assert payload["orphans_after_cleanup"] == []


@pytest.mark.torch_envs
def test_job_that_shrinks_in_place_matches_a_reference_that_shrinks_at_the_same_step(
    make_context, store, tmp_path, monkeypatch
):
    """Issue 28 item 5: the other outcome. Rank 1 of three is lost between steps and inside
    a backward pass; the survivors go on as a world of two, and every step is compared with
    a fault-free run in which rank 1 leaves after the same step."""
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))  # the environments are built
    job = f"{JOBS / 'reconfigures_in_place.py'} --steps 10"
    faults = ["kill:shrink", "kill-in-backward:shrink"]
    _, results = _drill_job(make_context, store, job, faults, ranks=3)
    for role in ("baseline", "candidate"):
        for fault in faults:
            result = results[(fault, role)]
            payload = result.payload
            assert result.verdict == "passed", (role, fault, payload["reason"])
            reason = payload["reason"]
            assert "compared with a fault-free run in which rank 1 leaves after step 4" in reason
            assert payload["reference"]["leave"] == {"after_step": 4, "ranks": [1]}
            assert payload["in_place"]["dead"] == [1] and payload["in_place"]["replacements"] == 0
            recovered = payload["in_place"]["recovered"]
            assert {r["world"] for r in recovered} == {2} and len(recovered) == 2  # 3 -> 2
            assert {r["resume_step"] for r in recovered} == {5}
            check = payload["step_check"]
            assert check["steps_compared"] == 10 and check["steps_missing"] == []
            assert payload["orphans_after_cleanup"] == []
        assert results[("kill-in-backward:shrink", role)].payload["struck_in_backward_of_step"] == 5
        shrunk = results[("reference:job-shrink", role)]
        assert shrunk.verdict == "passed", shrunk.payload.get("reason")
