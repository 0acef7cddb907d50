"""Runs a function on N local ranks of a real process group, for probes and benchmarks.

Each rank is a fresh subprocess of the current interpreter (``rank_main``) that joins a
group over loopback, calls ``target(rank, world_size, **kwargs)`` and writes its JSON
answer to a file. The parent enforces one deadline for all ranks and kills every rank on
timeout, so a hung collective can never hang the worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary.worker.calls import RANK_MAIN


class RanksFailed(RuntimeError):
    """At least one rank crashed, raised, or missed the deadline; ``ranks`` tells which."""

    def __init__(self, message: str, ranks: list[dict[str, Any]]):
        super().__init__(message)
        self.ranks = ranks


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(
    target: str,
    world_size: int,
    kwargs: dict[str, Any] | None = None,
    *,
    backend: str = "gloo",
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Each rank's return value, in rank order; raises RanksFailed on any failure.

    A target that raises does not fail the group: its value is ``{"raised": "...",
    "traceback": "..."}`` so a probe can report what the API said.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="canary-ranks-") as scratch:
        procs = []
        for rank in range(world_size):
            rank_env = dict(os.environ)
            rank_env.update(env or {})
            rank_env.update(
                {
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": str(rank),
                    "TORCHCANARY_PARENT_PID": str(os.getpid()),
                }
            )
            spec = json.dumps(
                {
                    "target": target,
                    "kwargs": kwargs or {},
                    "backend": backend,
                    "timeout_s": timeout_s,
                    "out": str(Path(scratch) / f"rank{rank}.json"),
                }
            )
            stderr = open(Path(scratch) / f"rank{rank}.err", "wb")  # noqa: SIM115
            procs.append(
                (
                    subprocess.Popen(
                        [sys.executable, "-m", RANK_MAIN, spec],
                        env=rank_env,
                        stdout=stderr,
                        stderr=stderr,
                        start_new_session=True,
                    ),
                    stderr,
                )
            )
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
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stderr.close()
        outcomes: list[dict[str, Any]] = []
        for rank, (proc, _) in enumerate(procs):
            out = Path(scratch) / f"rank{rank}.json"
            value = json.loads(out.read_text()) if out.exists() else None
            err = (Path(scratch) / f"rank{rank}.err").read_text(errors="replace")[-3000:]
            outcomes.append(
                {"rank": rank, "returncode": proc.returncode, "value": value, "stderr_tail": err}
            )
    failed = [o for o in outcomes if o["returncode"] != 0 or o["value"] is None]
    if timed_out or failed:
        what = f"timed out after {timeout_s:g} s" if timed_out else "failed"
        names = ", ".join(f"rank {o['rank']} (exit {o['returncode']})" for o in failed)
        last_words = next(
            (o["stderr_tail"].strip().splitlines()[-1] for o in failed if o["stderr_tail"].strip()),
            "",
        )
        raise RanksFailed(
            f"{world_size}-rank {backend} run of {target} {what}: {names}"
            + (f"; {last_words[:300]}" if last_words else ""),
            outcomes,
        )
    return [o["value"]["value"] for o in outcomes]
