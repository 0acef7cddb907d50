"""Running the real ``torchcanary`` command line: in a subprocess, as a user would, or through
``cli.main`` in the test's own process where the subprocess is not the point."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def canary_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def canary_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "torchcanary.cli", *args]


def run_canary(
    *args: str, cwd: Path, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        canary_command(*args),
        cwd=cwd,
        env=canary_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_canary_here(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``run_canary``'s result, from ``cli.main(args)`` in this process (in ``cwd``, with
    ``env`` set): what a command prints and its exit status, without a Python start.

    For error paths and quick commands. Keep ``run_canary`` where the process is the point:
    what it imports (torch, Ray), plugin discovery from ``PYTHONPATH``, the console script,
    signals, a run that builds environments or starts workers.
    """
    from torchcanary import cli

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.chdir(cwd)
        for name, value in env.items():
            patch.setenv(name, value)
        try:
            code = cli.main(list(args))
        except SystemExit as exited:  # argparse's usage errors and --help
            code = exited.code if isinstance(exited.code, int) else int(exited.code is not None)
    return subprocess.CompletedProcess(["torchcanary", *args], code, out.getvalue(), err.getvalue())
