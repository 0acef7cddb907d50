"""Whether a process the tests started is still running, read from ``/proc``."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """Alive and not a zombie (one its parent has not reaped yet is gone for all that
    matters here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1]
    except (OSError, IndexError):
        return False
    return not state.startswith("Z")
