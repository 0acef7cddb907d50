"""Running the real ``torchcanary`` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
