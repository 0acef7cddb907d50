"""Starts a worker inside a target environment and calls into it, surviving its failures.

The worker may segfault, hang, exit, run out of memory or print garbage; each becomes a
:class:`CallResult` with a status, never an exception in the orchestrator. A worker that
failed is discarded and the next call starts a fresh one. Each worker gets a temporary folder
of its own (``TMPDIR``), removed when it goes: a probe's scratch outlives a worker that was
killed in the middle of it otherwise. The folder's name carries the orchestrator's pid, so
that the next run removes what a run killed with SIGKILL left behind.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary.worker.calls import WORKER_MAIN
from torchcanary.worker.lifeline import OWN_TMPDIR_VARIABLE
from torchcanary.worker.protocol import MAX_LINE_BYTES, ProtocolError, decode, encode

STARTUP_TIMEOUT_S = 60.0
_SCRATCH_PREFIX = "torchcanary-worker-"
_STDERR_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class CallResult:
    """How one call into a worker ended. ``status``: ok, error, crashed, timeout."""

    status: str
    value: Any = None
    error: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def import_root_for(package_names: tuple[str, ...], root: Path) -> Path:
    """A directory holding only links to the named top-level packages.

    Putting it on the worker's PYTHONPATH makes torchcanary (and probe plugins) importable
    in the target environment without leaking the orchestrator's other packages into it.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in package_names:
        source = Path(str(__import__(name).__file__))
        if source.name == "__init__.py":
            source = source.parent
        link = root / source.name
        if link.is_symlink() and link.resolve() == source.resolve():
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source.resolve())
    return root


def _run_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _remove_orphaned_scratch() -> None:
    """Remove the workers' folders whose run is gone.

    A worker removes its own folder when it sees its run gone (worker.lifeline), but a run
    killed with SIGKILL between stopping a worker and removing its folder leaves one behind.
    Folders of live runs, of other users, or without a pid in the name are left alone.
    """
    for folder in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*"):
        pid = folder.name[len(_SCRATCH_PREFIX) :].partition("-")[0]
        with contextlib.suppress(OSError):
            if pid.isdigit() and folder.stat().st_uid == os.getuid() and _run_is_gone(int(pid)):
                shutil.rmtree(folder)


def _new_scratch_folder() -> str:
    _remove_orphaned_scratch()
    return tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-")


@dataclass
class WorkerProcess:
    """One live worker process in one environment."""

    python: str
    import_root: Path
    env_vars: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _lines: queue.Queue[bytes | None] = field(default_factory=queue.Queue)
    _stderr: collections.deque[bytes] = field(default_factory=collections.deque)
    _next_id: int = 1
    _tmp_dir: str | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> CallResult:
        env = dict(os.environ)
        env.update(self.env_vars)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.import_root), self.env_vars.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["TORCHCANARY_PARENT_PID"] = str(os.getpid())
        env.pop("PYTHONHOME", None)
        if "TMPDIR" not in self.env_vars:
            self._tmp_dir = _new_scratch_folder()
            env["TMPDIR"] = env[OWN_TMPDIR_VARIABLE] = self._tmp_dir
        started = time.monotonic()
        self._proc = subprocess.Popen(
            [self.python, "-m", WORKER_MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.cwd,
            start_new_session=True,
        )
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        hello = self._await(0, STARTUP_TIMEOUT_S, started)
        if not hello.ok:
            self.kill()
        return hello

    def call(self, func: str, kwargs: dict[str, Any], timeout_s: float) -> CallResult:
        """Run ``func(**kwargs)`` in the worker; a worker that fails is killed and dropped."""
        if not self.alive():
            hello = self.start()
            if not hello.ok:
                return hello
        assert self._proc is not None and self._proc.stdin is not None
        self._stderr.clear()
        request_id = self._next_id
        self._next_id += 1
        started = time.monotonic()
        try:
            self._proc.stdin.write(encode({"id": request_id, "func": func, "kwargs": kwargs}))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the death is reported by _await with its signal
        result = self._await(request_id, timeout_s, started)
        if result.status in ("crashed", "timeout") or (
            result.status == "error" and result.error.startswith("protocol:")
        ):
            self.kill()
        return result

    def _await(self, request_id: int, timeout_s: float, started: float) -> CallResult:
        deadline = started + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return self._failed("timeout", f"no answer within {timeout_s:g} s", started)
            try:
                line = self._lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if line is None:
                return self._death(started)
            try:
                message = decode(line)
            except ProtocolError as exc:
                return self._failed("error", f"protocol: worker sent garbage ({exc})", started)
            if message.get("id") != request_id:
                continue  # a stale answer to a call that already timed out
            elapsed = time.monotonic() - started
            if message.get("ok"):
                return CallResult(
                    "ok",
                    value=message.get("value"),
                    duration_s=elapsed,
                    stderr_tail=self.stderr_tail(),
                )
            return CallResult(
                "error",
                error=str(message.get("error", "")),
                traceback=str(message.get("traceback", "")),
                stderr_tail=self.stderr_tail(),
                duration_s=elapsed,
            )

    def _death(self, started: float) -> CallResult:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self._proc.wait()
        time.sleep(0.05)  # let the stderr pump catch the last words
        if code < 0:
            name = signal.Signals(-code).name
            reason = f"worker killed by {name}"
            if name == "SIGKILL":
                reason += " (often the out-of-memory killer)"
        else:
            reason = f"worker exited with status {code} without answering"
        return self._failed("crashed", reason, started)

    def _failed(self, status: str, error: str, started: float) -> CallResult:
        return CallResult(
            status,
            error=error,
            stderr_tail=self.stderr_tail(),
            duration_s=time.monotonic() - started,
        )

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")[-_STDERR_TAIL_BYTES:]

    def _pump_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        lines = self._lines
        stream = self._proc.stdout
        while True:
            line = stream.readline(MAX_LINE_BYTES + 1)
            if not line:
                lines.put(None)
                return
            lines.put(line)

    def _pump_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        kept = 0
        while chunk := self._proc.stderr.read1(65536):  # type: ignore[attr-defined]
            self._stderr.append(chunk)
            kept += len(chunk)
            while kept > _STDERR_TAIL_BYTES and len(self._stderr) > 1:
                kept -= len(self._stderr.popleft())

    def kill(self) -> None:
        """Kill the worker and everything it started (it leads its own session); its
        temporary folder goes with it.

        The session is killed even when the worker has already ended: a worker ends without
        the interpreter's teardown (``worker/ending.py``), so a pool a probe started is not
        stopped by its atexit hooks. Its members keep the worker's pid from being reused.
        """
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        self._lines = queue.Queue()
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
        self.kill()
