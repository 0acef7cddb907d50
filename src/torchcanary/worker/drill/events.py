"""The job's event log: one JSON object per line, one file per rank and launch.

Worker side writes it (standard library only); the orchestrator reads it to inject faults at
a chosen step and to rebuild the timeline afterwards. Lines are flushed as they are written
so a rank that is killed mid-run leaves every event up to its death on disk.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Appends events for one process; every event carries wall time, rank and launch."""

    def __init__(self, path: Path, rank: int, attempt: int) -> None:
        self.path = path
        self.rank = rank
        self.attempt = attempt
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 (lives as long as the job)

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "ev": event,
            "t": time.time(),
            "rank": self.rank,
            "attempt": self.attempt,
            "pid": os.getpid(),
            **fields,
        }
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()


def read_events(directory: Path) -> list[dict[str, Any]]:
    """Every event under ``directory`` (all ranks, all launches), in time order.

    A half-written last line (the writer was killed mid-write) is skipped, not an error.
    """
    events: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "ev" in record:
                record["log"] = path.name
                events.append(record)
    events.sort(key=lambda record: float(record.get("t", 0.0)))
    return events
