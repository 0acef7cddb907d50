"""A probe that crashes, hangs, floods output or exits is recorded, and the run goes on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from torchcanary.claims import section as claims_section
from torchcanary.claims.records import probe_results
from torchcanary.context import ROLES
from torchcanary.envs.worker_process import WorkerProcess, import_root_for
from torchcanary.probe_result import Verdict

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.torch_envs


@pytest.fixture
def faulty_context(make_context, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FIXTURES))
    claims = {"probes": ["faulty.*"], "probe_modules": ["canary_faulty"]}
    context = make_context(sections=("claims",), settings={"claims": claims})
    context.import_root = import_root_for(("torchcanary", "canary_faulty"), tmp_path / "root")
    return context


def test_every_faulty_probe_gets_its_own_verdict_and_the_run_goes_on(faulty_context):
    claims_section.run(faulty_context)
    results = {
        (r.env_role, r.probe_id): r.outcome
        for r in probe_results(faulty_context.store, faulty_context.run_id)
    }
    for role in ("baseline", "candidate"):
        assert results[(role, "faulty.segfault")].verdict is Verdict.CRASHED
        assert "SIGSEGV" in results[(role, "faulty.segfault")].summary
        assert results[(role, "faulty.hang")].verdict is Verdict.TIMEOUT
        assert results[(role, "faulty.exit")].verdict is Verdict.CRASHED
        assert "status 7" in results[(role, "faulty.exit")].summary
        raised = results[(role, "faulty.raises")]
        assert raised.verdict is Verdict.ERROR
        assert "RuntimeError" in raised.summary and "Traceback" in raised.evidence["traceback"]
        # 20 MB of stdout noise neither corrupts the protocol nor loses the answer.
        assert results[(role, "faulty.huge-output")].verdict is Verdict.CONFIRMED
        gpu = results[(role, "faulty.needs-gpu")]
        assert gpu.verdict is Verdict.NOT_CHECKABLE and "cuda" in gpu.summary
    # the two environments' probes ran side by side, and the timed one alone after them
    stored = probe_results(faulty_context.store, faulty_context.run_id)
    spans = {(r.env_role, r.probe_id): (r.started_at, r.started_at + r.duration_s) for r in stored}
    untimed = [span for key, span in spans.items() if key[1] != "faulty.timed"]
    first_start = {role: min(s for (r, _), (s, _) in spans.items() if r == role) for role in ROLES}
    last_end = {role: max(e for (r, _), (_, e) in spans.items() if r == role) for role in ROLES}
    assert first_start["candidate"] < last_end["baseline"]
    assert first_start["baseline"] < last_end["candidate"]
    for role in ROLES:
        assert results[(role, "faulty.timed")].verdict is Verdict.CONFIRMED
        assert spans[(role, "faulty.timed")][0] >= max(end for _, end in untimed)
    # the probes after each failure still ran with the torch of their own environment
    assert results[("baseline", "faulty.hostile")].evidence["torch_version"].startswith("2.13")
    assert results[("candidate", "faulty.hostile")].evidence["torch_version"].startswith("2.14")
    # each environment's workers, a replaced one too, compile into one cache of the run's
    for role in ROLES:
        shared = faulty_context.work_dir / "claims-compile" / role / "inductor"
        assert results[(role, "faulty.hostile")].evidence["compile_cache"] == str(shared)


def test_worker_that_writes_garbage_on_the_protocol_is_reported_and_replaced(
    baseline_env, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(FIXTURES))
    root = import_root_for(("torchcanary", "canary_faulty"), tmp_path / "root")
    worker = WorkerProcess(baseline_env.python, root)
    try:
        assert worker.call("os:getpid", {}, 60).ok
        first_pid = worker.pid
        bad = worker.call("canary_faulty.protocol:write_garbage_to_protocol", {}, 30)
        assert bad.status == "error" and "garbage" in bad.error
        assert not worker.alive()
        after = worker.call("os:getpid", {}, 60)
        assert after.ok and after.value != first_pid
    finally:
        worker.close()


def test_worker_killed_by_a_signal_names_the_signal_and_a_fresh_one_takes_over(
    baseline_env, tmp_path
):
    root = import_root_for(("torchcanary",), tmp_path / "root")
    worker = WorkerProcess(baseline_env.python, root)
    try:
        raised = worker.call("json:loads", {"s": "{"}, 30)
        assert raised.status == "error" and "JSONDecodeError" in raised.error
        assert worker.alive()  # an exception is an answer, the worker stays
        killed = worker.call("os:abort", {}, 30)
        assert killed.status == "crashed" and "SIGABRT" in killed.error
        assert not worker.alive()
        assert worker.call("os:getpid", {}, 60).ok
    finally:
        worker.close()


def test_worker_keeps_its_temporary_files_in_a_folder_that_goes_when_it_dies(
    baseline_env, import_root
):
    worker = WorkerProcess(baseline_env.python, import_root)
    try:
        made = worker.call("tempfile:mkdtemp", {"prefix": "canary-probe-"}, 60)
        assert made.ok, made.error
        own = Path(made.value).parent
        assert own.name.startswith("torchcanary-worker-") and own.is_dir()
        died = worker.call("os:abort", {}, 60)  # as a probe that crashes mid-way
        assert died.status == "crashed" and "SIGABRT" in died.error
        assert not own.exists()
    finally:
        worker.close()


def test_a_worker_folder_left_by_a_run_killed_with_sigkill_goes_with_the_next_worker(
    baseline_env, import_root, session_temp_dir
):
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphaned = session_temp_dir / f"torchcanary-worker-{dead.pid}-abc"
    live = session_temp_dir / f"torchcanary-worker-{os.getpid()}-abc"
    for folder in (orphaned, live):
        (folder / "probe-scratch").mkdir(parents=True)
    worker = WorkerProcess(baseline_env.python, import_root)
    try:
        assert worker.call("os:getpid", {}, 60).ok
        assert not orphaned.exists()
        assert live.is_dir()  # this run's own, in use
    finally:
        worker.close()
        shutil.rmtree(live)
