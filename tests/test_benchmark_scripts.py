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
