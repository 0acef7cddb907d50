"""Ties a worker-side process to the orchestrator that started it (Linux).

A run killed with SIGKILL cannot clean up, so each worker and rank asks the kernel to kill
it when its parent dies; nothing a hung probe started outlives the run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    expected_parent = os.environ.get("TORCHCANARY_PARENT_PID")
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        return
    if expected_parent and os.getppid() != int(expected_parent):
        # The parent died before the lifeline was tied, or the variable leaked from a parent
        # of a parent: either way nobody is listening for this process's answers.
        sys.stderr.write(f"torchcanary: parent {expected_parent} is gone; exiting\n")
        os._exit(1)
