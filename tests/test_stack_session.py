"""The stack's command runner under hostile commands: real subprocesses, no torch needed."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

from process_helpers import running
from torchcanary.user_command.session import run_command


def _run(tmp_path: Path, code: str, timeout_s: float = 30.0, **limits: int):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return run_command(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=timeout_s,
        log_path=tmp_path / "out.log",
        **limits,
    )


def test_missing_program_is_reported_as_not_found_without_raising(tmp_path: Path):
    outcome = run_command(
        ["no-such-program-xyz", "--flag"],
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=5,
        log_path=tmp_path / "out.log",
    )
    assert outcome.status == "not-found"
    assert "no-such-program-xyz" in outcome.describe()
    assert not outcome.succeeded


def test_exit_status_and_both_streams_are_kept(tmp_path: Path):
    outcome = _run(
        tmp_path,
        """
        import sys
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """,
    )
    assert (outcome.status, outcome.exit_code) == ("exited", 3)
    assert "to stdout" in outcome.stdout_tail and "to stderr" in outcome.stderr_tail
    assert "to stdout" in Path(outcome.log_path).read_text()


def test_hung_command_is_killed_at_its_timeout(tmp_path: Path):
    started = time.monotonic()
    outcome = _run(
        tmp_path, "import time\nprint('waiting', flush=True)\ntime.sleep(600)\n", timeout_s=1.5
    )
    assert outcome.status == "timeout"
    assert time.monotonic() - started < 15
    assert "waiting" in outcome.stdout_tail
    assert "timed out" in outcome.describe()


def test_children_left_behind_are_killed_and_named_even_after_setsid(tmp_path: Path):
    pid_file = tmp_path / "pids"
    outcome = _run(
        tmp_path,
        f"""
        import os, subprocess, sys
        sleeper = "import time; time.sleep(600)"
        kept = subprocess.Popen([sys.executable, "-c", sleeper],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        escaped = subprocess.Popen([sys.executable, "-c", sleeper], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pid_file)!r}, "w").write(f"{{kept.pid}} {{escaped.pid}}")
    """,
    )
    pids = [int(p) for p in pid_file.read_text().split()]
    assert outcome.succeeded
    assert len(outcome.stragglers) == 2
    assert {int(s.split()[0]) for s in outcome.stragglers} == set(pids)
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in pids)
    assert "left 2 process(es) behind" in outcome.describe()


def test_enormous_output_is_bounded_on_disk_and_in_memory(tmp_path: Path):
    outcome = _run(
        tmp_path,
        """
        import sys
        line = "x" * 1023 + "\\n"
        for _ in range(40 * 1024):  # 40 MiB
            sys.stdout.write(line)
        print("LAST LINE")
    """,
        tail_bytes=4096,
        log_limit_bytes=1024 * 1024,
    )
    assert outcome.succeeded
    assert outcome.output_bytes > 40 * 1024 * 1024
    assert outcome.log_truncated
    assert Path(outcome.log_path).stat().st_size < 1024 * 1024 + 200
    assert len(outcome.stdout_tail) <= 4096
    assert outcome.stdout_tail.rstrip().endswith("LAST LINE")


def test_a_crash_by_signal_is_told_apart_from_an_exit(tmp_path: Path):
    outcome = _run(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert outcome.status == "signalled"
    assert "SIGSEGV" in outcome.describe()
