"""The benchmark scripts are not run by CI (they take minutes to hours), so at least
check that each one still imports against the current package and explains itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parents[1] / "benchmarks").glob("*.py"))


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
