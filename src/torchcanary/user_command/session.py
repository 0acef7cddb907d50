"""Runs one command in a session of its own: a deadline, bounded output, nothing left behind.

A user's suite may hang, print gigabytes, or fork helpers that outlive it. The command
leads a new session, so its whole process group can be killed on timeout; its output goes
through pipes into a log file that stops growing at a limit while the tail is kept in memory;
and when it ends, every process still in its session, or still carrying the run's token in
its environment (one that called ``setsid`` to escape), is killed and named in the outcome.
The token scan reads ``/proc``; where there is none, only the process group is cleaned up.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

TOKEN_VAR = "TORCHCANARY_STACK_TOKEN"
_GRACE_S = 2.0
_JOIN_S = 5.0


@dataclass(frozen=True)
class CommandOutcome:
    """How one command ended. ``status``: exited, signalled, timeout or not-found."""

    argv: list[str]
    status: str
    exit_code: int | None
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    output_bytes: int
    log_truncated: bool
    log_path: str
    stragglers: list[str]
    error: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status == "exited" and self.exit_code == 0

    def describe(self) -> str:
        """One line for reports: how it ended and what was cleaned up."""
        if self.status == "not-found":
            return self.error
        if self.status == "timeout":
            text = f"timed out after {self.duration_s:.0f} s and was killed"
        elif self.status == "signalled":
            text = f"killed by {_signal_name(self.exit_code)}"
        else:
            text = f"exited with status {self.exit_code}"
        if self.stragglers:
            text += f"; left {len(self.stragglers)} process(es) behind, killed"
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommandOutcome:
        return cls(**data)


def _signal_name(exit_code: int | None) -> str:
    try:
        return signal.Signals(-(exit_code or 0)).name
    except ValueError:
        return f"signal {-(exit_code or 0)}"


class _Capture(threading.Thread):
    """Drains one pipe: copies it into the shared log up to a limit, keeps the last bytes."""

    def __init__(self, stream: IO[bytes], log: _BoundedLog, tail_bytes: int) -> None:
        super().__init__(daemon=True)
        self._stream = stream
        self._log = log
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = tail_bytes
        self._kept = 0
        self.total = 0

    def run(self) -> None:
        while chunk := self._stream.read1(65536):  # type: ignore[attr-defined]
            self.total += len(chunk)
            self._log.write(chunk)
            self._tail.append(chunk)
            self._kept += len(chunk)
            while self._kept - len(self._tail[0]) >= self._tail_bytes:
                self._kept -= len(self._tail.popleft())

    def tail(self) -> str:
        data = b"".join(self._tail)
        if len(data) > self._tail_bytes:
            data = data[-self._tail_bytes :]
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else data
        return data.decode(errors="replace")


class _BoundedLog:
    """The command's combined output on disk, cut off at ``limit`` bytes with a note."""

    def __init__(self, path: Path, limit: int) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._limit = limit
        self._written = 0
        self._lock = threading.Lock()
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        with self._lock:
            room = self._limit - self._written
            if room > 0:
                self._file.write(chunk[:room])
                self._written += min(room, len(chunk))
            if len(chunk) > room and not self.truncated:
                self.truncated = True
                self._file.write(
                    f"\n[torchcanary: output beyond {self._limit} bytes was not kept]\n".encode()
                )

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _why_not_started(exc: OSError, program: str, env: dict[str, str]) -> str:
    """The reason in words; a script whose interpreter is missing also raises "not found"."""
    if not isinstance(exc, FileNotFoundError):
        return f"cannot start ({exc})"
    found = shutil.which(program, path=env.get("PATH"))
    try:
        with open(found or "", "rb") as script:
            first_line = script.readline(512).decode(errors="replace").strip()
    except OSError:
        return "was not found"
    return f"is at {found} but cannot start: the interpreter it names is missing ({first_line})"


def run_command(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    log_path: Path,
    tail_bytes: int = 64 * 1024,
    log_limit_bytes: int = 16 * 1024 * 1024,
) -> CommandOutcome:
    """Run ``argv`` to completion or ``timeout_s``; never raises for the command's failures."""
    token = uuid.uuid4().hex
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, TOKEN_VAR: token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:  # missing program, not executable
        return _not_started(argv, env, log_path, exc)
    log = _BoundedLog(log_path, log_limit_bytes)
    assert proc.stdout is not None and proc.stderr is not None
    captures = [_Capture(proc.stdout, log, tail_bytes), _Capture(proc.stderr, log, tail_bytes)]
    for capture in captures:
        capture.start()
    status = "exited"
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status = "timeout"
    except BaseException:  # the run interrupted (Ctrl-C, SIGTERM): the command ends with it
        reap_session(proc.pid, token)
        raise
    duration = time.monotonic() - started
    stragglers = reap_session(proc.pid, token)  # on timeout, the command itself too
    proc.wait()
    for capture in captures:
        capture.join(_JOIN_S)  # an escaped process may still hold a pipe; do not wait on it
    log.close()
    code = proc.returncode
    if status == "exited" and code is not None and code < 0:
        status = "signalled"
    return CommandOutcome(
        argv,
        status,
        code,
        duration,
        captures[0].tail(),
        captures[1].tail(),
        captures[0].total + captures[1].total,
        log.truncated,
        str(log_path),
        stragglers,
    )


def _not_started(
    argv: list[str], env: dict[str, str], log_path: Path, exc: OSError
) -> CommandOutcome:
    """The outcome of a command whose program could not be started, why written to its log."""
    reason = _why_not_started(exc, argv[0], env)
    log_path.write_text(f"{argv[0]} {reason}\n")
    return CommandOutcome(
        argv,
        "not-found",
        None,
        0.0,
        "",
        "",
        0,
        False,
        str(log_path),
        [],
        error=f"program {argv[0]!r} {reason}",
    )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _session_members(leader: int, token: str) -> dict[int, str]:
    """Live processes in ``leader``'s session or group, or carrying ``token``: pid -> cmdline."""
    members: dict[int, str] = {}
    marker = f"{TOKEN_VAR}={token}".encode()
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return members
    for entry in proc_root.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            state, pgrp, session = fields[0], int(fields[2]), int(fields[3])
            if state == "Z":
                continue
            ours = leader in (pgrp, session)
            if not ours:
                ours = marker in (entry / "environ").read_bytes().split(b"\0")
            if ours:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
                members[int(entry.name)] = cmdline.decode(errors="replace")[:200]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return members


def reap_session(leader: int, token: str) -> list[str]:
    """Kill what is still running in the command's session (TERM, then KILL).

    Returns ``"pid cmdline"`` of each process killed other than the command itself.
    """
    members = _session_members(leader, token)
    if not members:
        return []
    _signal_group(leader, signal.SIGTERM)
    for pid in members:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline and _session_members(leader, token):
        time.sleep(0.05)
    _signal_group(leader, signal.SIGKILL)
    for pid in _session_members(leader, token):
        _kill(pid, signal.SIGKILL)
    return [f"{pid} {cmdline}" for pid, cmdline in sorted(members.items()) if pid != leader]


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
