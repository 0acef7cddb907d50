"""A run stopped by SIGTERM (a CI job's time limit, ``kill``) stops what it started: the
user's command is ended with it, and the run says it was terminated."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from cli_helpers import canary_command, canary_env
from process_helpers import running

HOLD = """\
import os, pathlib, time
pathlib.Path("held.pid").write_text(str(os.getpid()))
time.sleep(300)
"""


def test_sigterm_ends_the_run_and_the_users_command_it_started(
    tmp_path: Path, baseline_env, candidate_env
) -> None:
    (tmp_path / "hold.py").write_text(HOLD)
    run = subprocess.Popen(
        canary_command("run", "--only", "stack", "--stack", "python hold.py", "--quiet"),
        cwd=tmp_path,
        env=canary_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid_file = tmp_path / "held.pid"
    deadline = time.monotonic() + 240
    while not pid_file.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), run.communicate(timeout=60)
    time.sleep(0.5)  # the pid is written before the sleep starts
    held = int(pid_file.read_text())
    assert running(held)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 143, err
    assert "torchcanary: terminated (SIGTERM); finished results are stored" in err
    assert not running(held)
