"""Runs a function on N local ranks of a real process group, for probes and benchmarks.

Each rank is a subprocess (``rank_main``) that joins a group over loopback, calls
``target(rank, world_size, **kwargs)`` and writes its JSON answer to a file. The parent
enforces one deadline for all ranks and kills every rank on timeout, so a hung collective
can never hang the worker.

A rank is a fresh interpreter by default, as a probe needs (what it checks may depend on
how torch starts). The bench's collectives may instead fork the ranks from the worker,
which is itself fresh for each round group: that skips two imports of torch per group
and side (about four of the six seconds a set of ranks took on two cores) and times the
same collectives. Forking is refused once CUDA is initialised, since a forked child
cannot use it; such callers spawn.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from torchcanary.worker.calls import RANK_MAIN

Start = Literal["spawn", "fork"]


class RanksFailed(RuntimeError):
    """At least one rank crashed, raised, or missed the deadline; ``ranks`` tells which.

    ``formed`` says whether every rank had joined the group: a group that never formed
    (a rank too slow to start, a port taken) says nothing about what the target does.
    """

    def __init__(self, message: str, ranks: list[dict[str, Any]]):
        super().__init__(message)
        self.ranks = ranks
        self.formed = all(rank["joined"] for rank in ranks)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ForkedRank:
    """A rank forked from this process, with the parts of ``Popen`` that run_ranks uses."""

    def __init__(self, spec: dict[str, Any], env: dict[str, str], log: Path) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # else the child's first write would repeat what is buffered
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:
            self._child(spec, env, log)

    @staticmethod
    def _child(spec: dict[str, Any], env: dict[str, str], log: Path) -> None:
        code = 1
        try:
            os.setsid()  # like start_new_session: a kill on timeout takes its children too
            _drop_pipes()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            os.environ.clear()
            os.environ.update(env)
            from torchcanary.worker.rank_main import serve

            serve(spec)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)  # never the parent's exit handlers or its buffered output

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


def _drop_pipes() -> None:
    """Close the pipes a forked rank inherited (the worker's line to the orchestrator).

    Otherwise a rank that outlives its worker for a moment holds that line open, and the
    orchestrator would not see the worker's end. Where there is no /proc (macOS) the pipes
    stay open; the rank's lifeline still ends it with its worker.
    """
    if not os.path.isdir("/proc/self/fd"):
        return
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)


def can_fork() -> bool:
    """Whether ranks may be forked from this process (never after CUDA is initialised)."""
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def run_ranks(
    target: str,
    world_size: int,
    kwargs: dict[str, Any] | None = None,
    *,
    backend: str = "gloo",
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    start: Start = "spawn",
    cpus: list[int] | None = None,
) -> list[Any]:
    """Each rank's return value, in rank order; raises RanksFailed on any failure.

    A target that raises does not fail the group: its value is ``{"raised": "...",
    "traceback": "..."}`` so a probe can report what the API said. ``start="fork"`` forks
    the ranks from this process (see the module docstring); ``cpus`` is the affinity each
    rank takes, since ranks otherwise inherit the caller's (a pinned worker's one core).
    """
    if start == "fork" and not can_fork():
        raise ValueError("ranks cannot be forked once CUDA is initialised; use start='spawn'")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="canary-ranks-") as folder:
        scratch = Path(folder)
        spec: dict[str, Any] = {
            "target": target,
            "kwargs": kwargs or {},
            "backend": backend,
            "timeout_s": timeout_s,
            "cpus": cpus,
        }
        procs = [
            _start_rank(
                rank,
                {
                    **spec,
                    "out": str(scratch / f"rank{rank}.json"),
                    "joined": str(scratch / f"rank{rank}.joined"),
                },
                _rank_env(rank, world_size, port, env),
                scratch / f"rank{rank}.err",
                start,
            )
            for rank in range(world_size)
        ]
        timed_out = _wait_or_kill(procs, timeout_s)
        outcomes = [_outcome(rank, proc, scratch) for rank, (proc, _) in enumerate(procs)]
    failed = [o for o in outcomes if o["returncode"] != 0 or o["value"] is None]
    if timed_out or failed:
        what = f"timed out after {timeout_s:g} s" if timed_out else "failed"
        names = ", ".join(f"rank {o['rank']} (exit {o['returncode']})" for o in failed)
        last_words = next(
            (o["stderr_tail"].strip().splitlines()[-1] for o in failed if o["stderr_tail"].strip()),
            "",
        )
        raise RanksFailed(
            f"{world_size}-rank {backend} run of {target} {what}"
            + ("" if all(o["joined"] for o in outcomes) else " before the group formed")
            + f": {names}"
            + (f"; {last_words[:300]}" if last_words else ""),
            outcomes,
        )
    return [o["value"]["value"] for o in outcomes]


_Rank = tuple["subprocess.Popen[bytes] | ForkedRank", Any]  # the process and its open log


def _rank_env(rank: int, world_size: int, port: int, env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment, the caller's additions, and the rank's place in the group."""
    return {
        **os.environ,
        **(env or {}),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "TORCHCANARY_PARENT_PID": str(os.getpid()),
    }


def _start_rank(
    rank: int, spec: dict[str, Any], env: dict[str, str], log: Path, start: Start
) -> _Rank:
    """One rank, forked or a fresh ``rank_main``, its output going to ``log``."""
    if start == "fork":
        return ForkedRank(spec, env, log), None
    stderr = open(log, "wb")  # noqa: SIM115 (closed once the rank has ended)
    proc = subprocess.Popen(
        [sys.executable, "-m", RANK_MAIN, json.dumps(spec)],
        env=env,
        stdout=stderr,
        stderr=stderr,
        start_new_session=True,
    )
    return proc, stderr


def _wait_or_kill(procs: list[_Rank], timeout_s: float) -> bool:
    """Wait for every rank under one deadline, then kill what is left; whether time ran out."""
    deadline = time.monotonic() + timeout_s
    timed_out = False
    for proc, _ in procs:
        remaining = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(remaining, 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    for proc, stderr in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # a forked rank killed before its setsid
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if stderr is not None:
            stderr.close()
    return timed_out


def _outcome(
    rank: int, proc: subprocess.Popen[bytes] | ForkedRank, scratch: Path
) -> dict[str, Any]:
    """What one ended rank left: its exit code, its answer (None if it wrote none), its log."""
    out = scratch / f"rank{rank}.json"
    value = json.loads(out.read_text()) if out.exists() else None
    err = (scratch / f"rank{rank}.err").read_text(errors="replace")[-3000:]
    return {
        "rank": rank,
        "returncode": proc.returncode,
        "value": value,
        "joined": (scratch / f"rank{rank}.joined").exists(),
        "stderr_tail": err,
    }
