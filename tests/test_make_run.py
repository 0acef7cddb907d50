"""``make run``, a newcomer's first command: its last lines say the verdict, why, and where
the report is, so a no-go's exit status (which make reports as "Error 1") reads as a
verdict, not a crash."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import canary_env

REPO = Path(__file__).resolve().parents[1]
THIRD_PARTY = Path(__file__).parent / "fixtures" / "third_party_section"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="not checked: no make")


def _make_run(cwd: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The Makefile's ``run`` target with its setup taken as done and ``bin_dir`` as the venv."""
    return subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "-o", "setup", "run", f"BIN={bin_dir}"],
        cwd=cwd,
        env=canary_env(COLUMNS="200", **env),
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.torch_envs
def test_a_no_go_make_run_ends_with_the_verdict_its_reason_and_the_report(tmp_path):
    """Issue 28 item 10: the real ``make run`` command line, answered no-go (a section whose
    policy no candidate can meet), ends with the verdict, its first reason, the report's
    path, and a line saying the exit status is that verdict, before make's own error line."""
    (tmp_path / "canary.toml").write_text(
        'sections = ["footprint"]\n[policy]\nmax_footprint_growth = -1.0\n'
    )
    result = _make_run(tmp_path, Path(sys.executable).parent, PYTHONPATH=str(THIRD_PARTY))
    assert result.returncode != 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-3:]
    assert last[0].startswith("verdict: no-go (exit 1): ") and "torch takes" in last[0], last
    report = Path(last[1].removeprefix("  report: "))
    assert report.name == "report.html" and (tmp_path / report).is_file(), last
    assert last[2].startswith("make run: exit 1 is the no-go verdict above, not a crash")
    assert result.stderr.strip().endswith("Error 1")  # make's own line comes after ours


@pytest.mark.parametrize(
    ("code", "says"),
    [(0, None), (2, "usage or configuration error"), (3, "the run could not finish")],
)
def test_make_run_explains_each_exit_status_and_keeps_it(tmp_path, code, says):
    """Issue 28 item 10: every exit status but go's gets a line saying what it means, and
    the recipe still exits with it (make reports it as "Error N")."""
    stub = tmp_path / "bin" / "torchcanary"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho torchcanary stand-in\nexit {code}\n")
    stub.chmod(0o755)
    result = _make_run(tmp_path, stub.parent)
    last = result.stdout.strip().splitlines()[-1]
    if says is None:
        assert result.returncode == 0 and last == "torchcanary stand-in"
        return
    assert result.returncode != 0 and f"Error {code}" in result.stderr
    assert last.startswith(f"make run: exit {code}") and says in last
