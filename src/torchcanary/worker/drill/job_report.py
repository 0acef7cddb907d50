"""The one line a user's job adds for a drill to see its steps: ``report_step(step, loss=...)``.

Worker side, standard library only: it runs inside the user's own job, under whatever torch
they have. Under a drill the job is started with ``TORCHCANARY_DRILL_EVENTS`` naming a folder
(and the torchcanary package on ``PYTHONPATH``), and each call appends one JSON line to this
rank's event log there, the same log format as the built-in drill job's, so the drill can
strike at an exact step and compare the loss step by step with the fault-free run. Outside a
drill the variable is unset and every call returns at once::

    from torchcanary.drill import report_step
    ...
    report_step(step, loss=loss.item(), lr=scheduler.get_last_lr()[0])
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

EVENTS_VARIABLE = "TORCHCANARY_DRILL_EVENTS"

_log: Any = None  # this process's open event log, opened on first use
helper_used = False  # set by the first report_step: the job's own reports are its steps
last_step: int | None = None  # the last step this rank reported (or printed)


def _open_log() -> Any:
    global _log
    directory = os.environ.get(EVENTS_VARIABLE)
    if not directory:
        return None
    if _log is None or _log.pid != os.getpid():  # a forked child writes its own lines
        _log = _EventFile(Path(directory))
    return _log


class _EventFile:
    """This rank's event log for this launch (``rank<R>.attempt<A>.jsonl``), line-flushed."""

    def __init__(self, directory: Path) -> None:
        self.pid = os.getpid()
        self.rank = int(os.environ.get("RANK", "0"))
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"rank{self.rank}.attempt{self.attempt}.jsonl"
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 (lives as long as the job)

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "ev": event,
            "t": time.time(),
            "rank": self.rank,
            "attempt": self.attempt,
            "pid": self.pid,
            **fields,
        }
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()


def emit(event: str, **fields: Any) -> None:
    """Append one event to this rank's log when under a drill; nothing otherwise."""
    global last_step
    if event == "step":
        last_step = int(fields["step"])
    log = _open_log()
    if log is not None:
        log.emit(event, **fields)


def report_step(step: int, loss: float | None = None, **metrics: Any) -> None:
    """Tell the drill that ``step`` has finished, with its loss and any other figures.

    Call it once per optimizer step, on every rank, after the step's collectives. Figures
    must be plain numbers (``loss.item()``, not a tensor). Outside a drill it does nothing.
    """
    global helper_used
    if os.environ.get(EVENTS_VARIABLE):
        helper_used = True
        emit(
            "step",
            step=int(step),
            loss=_plain(loss),
            source="helper",
            **{name: _plain(value) for name, value in metrics.items()},
        )


def _plain(value: Any) -> Any:
    """A number as a float (a 0-d tensor or numpy scalar too), anything else as given."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
