"""A run killed with SIGKILL loses nothing finished, and --resume does only what is left."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from cli_helpers import canary_command, canary_env, run_canary, run_canary_here

pytestmark = pytest.mark.torch_envs

RUN_ARGS = (
    "run",
    "--only",
    "claims",
    "--probe-module",
    "canary_faulty",
    "--probes",
    "faulty.hang,faulty.hostile,faulty.raises,faulty.needs-gpu",
    "--probe-timeout",
    "8",
    "--quiet",
)


def _stored(db) -> list[tuple[str, str, float]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        try:
            return connection.execute(
                "SELECT env_role, probe_id, started_at FROM probe_results"
            ).fetchall()
        except sqlite3.OperationalError:
            return []


def test_kill_9_mid_run_then_resume_keeps_finished_results_and_finishes(tmp_path):
    db = tmp_path / "canary-results" / "canary.db"
    proc = subprocess.Popen(
        canary_command(*RUN_ARGS),
        cwd=tmp_path,
        env=canary_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(_stored(db)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {(role, pid): started for role, pid, started in _stored(db)}
    assert 2 <= len(before) < 8, "the kill must land mid-run for this test to mean anything"

    resumed = run_canary(*RUN_ARGS[:-1], "--resume", cwd=tmp_path)
    # faulty.hang times out and faulty.raises raises in both environments: four planned
    # units not checked, so no go (issue 38), whatever the kill interrupted.
    assert resumed.returncode == 1, resumed.stderr
    after = {(role, pid): started for role, pid, started in _stored(db)}
    assert len(after) == 8
    for key, started in before.items():
        assert after[key] == started, f"{key} was redone instead of kept"
    with sqlite3.connect(db) as connection:
        runs = connection.execute("SELECT status FROM runs").fetchall()
    assert runs == [("finished",)]
    # The resumed invocation says where its own time went.
    results = json.loads((tmp_path / "canary-results" / "latest" / "results.json").read_text())
    assert set(results["decision_detail"]["seconds"]) == {"environments", "manifests", "claims"}
    (reason,) = results["decision_detail"]["reasons"]
    assert reason.startswith("section claims: 4 planned unit(s) not checked")
    assert (
        "faulty.hang (candidate) timeout" in reason and "faulty.raises (baseline) error" in reason
    )
    summary = (tmp_path / "canary-results" / "latest" / "summary.md").read_text()
    assert "Time: environments " in summary and " · claims " in summary


def test_resume_with_nothing_to_resume_is_a_clear_usage_error(tmp_path):
    result = run_canary_here("run", "--only", "claims", "--resume", cwd=tmp_path)
    assert result.returncode == 2
    assert "nothing to resume" in result.stderr
