"""Starting a drill's (or a rank host's) processes and making sure none outlives it.

torchrun starts each worker in a session of its own, and a replacement rank or a store host
is started apart from any torchrun, so killing one process group is not enough. Every
process a drill starts carries ``TORCHCANARY_DRILL=<token>`` in its environment, which its
children inherit; cleanup kills exactly the processes whose environment holds this drill's
token, and nothing else on the machine. Their temporary files (``TMPDIR``: torchrun's
``torchelastic_*`` folders, a job's own) go to the drill's folder, removed once they are dead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_VARIABLE = "TORCHCANARY_DRILL"
# Set by whoever runs torchcanary (a CI job, a test), it reaches every drill process with the
# rest of torchcanary's environment: that runner can tell its drills' processes from others'.
SCOPE_VARIABLE = "TORCHCANARY_DRILL_SCOPE"


def processes_with_token(token: str) -> list[int]:
    """Live pids whose environment holds ``TORCHCANARY_DRILL=token`` (zombies excluded)."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited meanwhile, or not ours to read
        if state != "Z":
            pids.append(int(entry.name))
    return pids


@dataclass
class ProcessSet:
    """The processes of one drill, all tagged with one token."""

    log_dir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def tmp_dir(self) -> Path:
        """The processes' ``TMPDIR`` (unless ``env`` names one), next to their logs."""
        return self.log_dir.with_name("tmp")

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start ``command`` in a new session, its output in ``<log_dir>/<name>.log``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        full_env.pop("PYTHONHOME", None)
        if "TMPDIR" not in env:
            self.tmp_dir.mkdir(exist_ok=True)
            full_env["TMPDIR"] = str(self.tmp_dir.absolute())
        full_env.update(env)
        full_env[TOKEN_VARIABLE] = self.token
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                command,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._started.append(proc)
        return proc

    def log_tail(self, name: str, limit: int = 3000) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-limit:] if path.exists() else ""

    def alive(self) -> list[int]:
        self._reap()
        return processes_with_token(self.token)

    def _reap(self) -> None:
        for proc in self._started:
            proc.poll()

    def wait_all(self, procs: list[subprocess.Popen[bytes]], deadline: float) -> bool:
        """True when every one of ``procs`` exited before ``deadline`` (monotonic)."""
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                return False
        return True

    def kill_all(self) -> list[int]:
        """SIGKILL every tagged process (stopped ones too) until none is left; their pids.

        Then their ``TMPDIR`` goes: a killed torchrun never removes its own folders there."""
        killed: list[int] = []
        for _ in range(50):
            pids = self.alive()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for proc in self._started:  # reap; any survivor is reported through alive()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if not self.alive():
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        return sorted(set(killed))
