"""Starts a user's job under a drill: notes its launch, watches its output, runs it unchanged.

Worker side, standard library only. torchrun starts ``python -m torchcanary.worker.drill.job_shim
train.py ARGS`` (or ``-m package.train ARGS``) where the user starts ``train.py ARGS``. In
this same process (same pid, the ``sys.argv`` and ``sys.path[0]`` the job expects) it

- writes a launch event (pid, rank, node, launch number), so a fault can find its target
  even in a job that reports nothing;
- wraps ``sys.stdout`` and ``sys.stderr`` so a printed line matching the drill's step
  pattern (``TORCHCANARY_DRILL_STEP_PATTERN``, named groups ``step`` and ``loss``) becomes a
  step event, for a job that only prints; once the job calls ``report_step`` itself, its own
  reports are the steps and the printed lines are left alone;
- under an in-place drill (``--in-place RECOVERY HOST:PORT GENERATION``, plain ranks, no
  torchrun) sets the variables of that contract (``job_inplace.py``) for the job;
- for ``kill-in-backward`` arms the target rank (``job_backward.py``);
- starts the job in ``job_cwd`` (``TORCHCANARY_DRILL_JOB_CWD``), as ``cd DIR && torchrun
  ...`` would, so its relative paths read from there;
- runs the job as ``__main__``; an exception that escapes it is written as an error event
  (one line) before it propagates as usual, and a normal end as a done event;
- after a normal end, frees what the job can no longer reach while the interpreter is
  whole (:func:`_let_go`), and writes an exit event naming the threads still alive.
"""

from __future__ import annotations

import gc
import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any, TextIO

from torchcanary.worker.drill import job_backward, job_inplace, job_report

PATTERN_VARIABLE = "TORCHCANARY_DRILL_STEP_PATTERN"
CWD_VARIABLE = "TORCHCANARY_DRILL_JOB_CWD"
_PENDING_LIMIT = 65536


class _LineWatcher:
    """A text stream that passes everything through and matches each complete line."""

    def __init__(self, stream: TextIO, pattern: re.Pattern[str]) -> None:
        self._stream = stream
        self._pattern = pattern
        self._pending = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if job_report.helper_used:
            return written
        self._pending = (self._pending + text)[-_PENDING_LIMIT:]
        *lines, self._pending = re.split(r"[\r\n]", self._pending)
        for line in lines:
            found = self._pattern.search(line)
            if found is None:
                continue
            groups = found.groupdict()
            try:
                step = int(groups["step"])
                loss = float(groups["loss"]) if groups.get("loss") else None
            except (KeyError, TypeError, ValueError):
                continue
            job_report.emit("step", step=step, loss=loss, source="log")
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _kind(text: str) -> str:
    """The kind of a failure, from its text: the same words the built-in job looks for."""
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return "timeout"
    peer_words = ("reset by peer", "closed by peer", "connection refused", "broken pipe")
    if any(word in lowered for word in (*peer_words, "connection closed")):
        return "peer-lost"
    return "other"


def _set_in_place(recovery: str, store: str, generation: str) -> None:
    """The variables of an in-place drill's rank (the contract in ``job_inplace.py``)."""
    host, _, port = store.rpartition(":")
    os.environ.update(
        {
            job_inplace.RECOVERY_VARIABLE: recovery,
            job_inplace.STORE_VARIABLE: store,
            "MASTER_ADDR": host,
            "MASTER_PORT": port,
            # env:// rendezvous then joins the drill's store as a client instead of serving one.
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }
    )
    if generation != "-":
        os.environ[job_inplace.JOIN_VARIABLE] = generation


def _let_go() -> None:
    """Free the job's module, and what only it holds, before the interpreter's exit.

    ``multiprocessing`` (imported with torch) keeps the job's ``__main__`` as
    ``sys.modules["__mp_main__"]``, so a DDP wrapper, and the gloo group it holds past
    ``destroy_process_group()``, lived into interpreter finalization. There a gloo worker
    thread dropping its last work's tensors needs the GIL and aborts the rank, now and then
    (torch 2.13 and 2.14: ``terminate called without an active exception``). Freed here,
    the group's destructor joins its threads. Anything the job still reaches (an atexit
    function, a running thread) keeps what it needs."""
    for name, module in list(sys.modules.items()):
        if (
            getattr(module, "__name__", None) == "__main__"
            and module is not sys.modules["__main__"]
        ):
            del sys.modules[name]
    gc.collect()


def _threads() -> list[str]:
    """The names of this process's threads other than the main one (Linux; else empty)."""
    tasks = Path("/proc/self/task")
    try:
        others = sorted((t for t in tasks.iterdir() if t.name != str(os.getpid())), key=str)
        return [(task / "comm").read_text().strip() for task in others]
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--in-place"] and len(args) >= 4:
        _set_in_place(*args[1:4])
        args = args[4:]
    if not args or (args[0] == "-m" and len(args) < 2):
        print(
            "usage: python -m torchcanary.worker.drill.job_shim [--in-place RECOVERY HOST:PORT "
            "GENERATION|-] SCRIPT|-m MODULE [ARGS]"
        )
        return 2
    pattern = os.environ.get(PATTERN_VARIABLE)
    if pattern:
        compiled = re.compile(pattern)
        sys.stdout = _LineWatcher(sys.stdout, compiled)  # type: ignore[assignment]
        sys.stderr = _LineWatcher(sys.stderr, compiled)  # type: ignore[assignment]
    job_cwd = os.environ.get(CWD_VARIABLE)
    if job_cwd:  # where the user starts the job (torchrun itself stays where it was started)
        os.chdir(job_cwd)
        os.environ["PWD"] = job_cwd
    job_report.emit("launch", node=os.environ.get("TORCHCANARY_NODE"), job=args[:4])
    if job_backward.arm():  # kill-in-backward: this rank waits inside a backward pass
        job_report.emit("armed", fault="kill-in-backward")
    job_report.emit("start")
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            if job_cwd:  # `python -m` looks for the module where it starts
                sys.path[0] = job_cwd
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = args
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):  # a job that caught a failure and exits is noticing
            job_report.emit("error", kind="exit", error=f"SystemExit({exc.code!r})"[:600])
        raise
    except BaseException as exc:
        text = f"{type(exc).__name__}: {exc}"[:600]
        job_report.emit("error", kind=_kind(text), error=text)
        raise
    job_report.emit("done")
    _let_go()
    job_report.emit("exit", threads=_threads())
    return 0


if __name__ == "__main__":
    sys.exit(main())
