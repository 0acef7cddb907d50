"""The benchmark scripts are not run by CI (they take minutes to hours), so at least
check that each one still imports against the current package and explains itself."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT_DIR = Path(__file__).parents[1] / "benchmarks"
SCRIPTS = sorted(SCRIPT_DIR.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_benchmark_script_imports_and_prints_its_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


def test_there_are_benchmark_scripts() -> None:
    assert len(SCRIPTS) >= 3


def test_the_main_job_walltime_times_a_new_candidate_against_the_warm_cache() -> None:
    """Issue 28 item 12: besides cold and warm (an identical rerun, where everything kept is
    reused) the benchmark times the weekly case: a new candidate, same baseline, same cache."""
    script = Path(__file__).parents[1] / "benchmarks" / "main_job_walltime.py"
    done = subprocess.run(
        [sys.executable, str(script), "--dry-run"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    labels = [line.split(":")[0].strip() for line in done.stdout.splitlines()]
    assert labels == ["cold", "warm", "new candidate"]
    assert "--candidate 'torch==2.14.0 numpy'" in done.stdout.splitlines()[2]


def test_suite_cpu_counts_a_childs_cpu_under_the_test_it_started_in(tmp_path: Path) -> None:
    """The CPU of a process a test starts is the test's, found by PYTEST_CURRENT_TEST."""
    script = Path(__file__).parents[1] / "benchmarks" / "suite_cpu.py"
    burn = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    env = {**os.environ, "PYTEST_CURRENT_TEST": "tests/t.py::test_burn (call)"}
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--json",
            str(tmp_path / "cpu.json"),
            "--",
            sys.executable,
            "-c",
            burn,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.endswith("tests/t.py::test_burn"))
    assert 0.6 <= float(line.split()[0]) <= 1.5, done.stdout
    kept = json.loads((tmp_path / "cpu.json").read_text()).values()
    assert any(p["test"] == "tests/t.py::test_burn" and "-c" in p["command"] for p in kept)


def test_suite_cpu_leaves_out_what_a_running_process_used_before_the_command(
    tmp_path: Path,
) -> None:
    """A server (or the machine's init) that was up before the command is counted for the
    CPU it uses during it, not for its whole life."""
    script = Path(__file__).parents[1] / "benchmarks" / "suite_cpu.py"
    burn_then_wait = (
        "import sys, time\nend = time.process_time() + 1.0\n"
        "while time.process_time() < end: pass\nprint('burned', flush=True)\ntime.sleep(60)"
    )
    env = {**os.environ, "PYTEST_CURRENT_TEST": "tests/t.py::test_before (call)"}
    with subprocess.Popen(
        [sys.executable, "-c", burn_then_wait], stdout=subprocess.PIPE, text=True, env=env
    ) as server:
        try:
            assert server.stdout is not None and server.stdout.readline() == "burned\n"
            done = subprocess.run(
                [sys.executable, str(script), "--", sys.executable, "-c", "pass"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            server.kill()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    line = next(line for line in lines if line.endswith("tests/t.py::test_before"))
    assert float(line.split()[0]) < 0.2, done.stdout


def test_the_main_job_walltime_makes_its_new_candidate_new_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second invocation would time a candidate whose verdicts and facts the first kept:
    what the cache holds of it (and only of it) is deleted before it runs."""
    found = importlib.util.spec_from_file_location("walltime", SCRIPT_DIR / "main_job_walltime.py")
    assert found and found.loader
    walltime = importlib.util.module_from_spec(found)
    monkeypatch.setitem(sys.modules, "walltime", walltime)  # its dataclasses look it up
    found.loader.exec_module(walltime)
    new, old = "torch==2.14.0 numpy", "torch==2.13.0 numpy"
    for name, spec in (("a1", new), ("b2", old)):
        (tmp_path / "envs" / name).mkdir(parents=True)
        (tmp_path / "envs" / name / "canary-env.json").write_text(json.dumps({"spec": spec}))
    (tmp_path / "claim-verdicts").mkdir()
    for name, spec in (("new", new), ("old", old)):
        entry = {"ingredients": {"environment": {"spec": spec, "manifest": {}}, "probe": "p"}}
        (tmp_path / "claim-verdicts" / f"{name}.json").write_text(json.dumps(entry))
    (tmp_path / "drill-references").mkdir()  # a drill names its environment in one string
    for name, spec in (("new", new), ("old", old)):
        entry = {"ingredients": {"environment": f"/e|/e/bin/python|2.x|{spec}", "spec": {}}}
        (tmp_path / "drill-references" / f"{name}.json").write_text(json.dumps(entry))
    assert walltime.forget_new_candidate(tmp_path, new) == 2
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["b2"]
    for folder in ("claim-verdicts", "drill-references"):
        assert [p.name for p in (tmp_path / folder).iterdir()] == ["old.json"]
