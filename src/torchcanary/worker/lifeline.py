"""Ties a worker-side process to the orchestrator that started it.

A run killed with SIGKILL cannot clean up, so each worker and rank watches its parent and
exits when it is gone; nothing a hung probe started outlives the run. A polling thread is
used rather than PR_SET_PDEATHSIG because the kernel fires that signal when the parent
*thread* that spawned the child exits, and the orchestrator starts workers from threads.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time

_POLL_S = 0.5


# The temporary folder the orchestrator made for this worker (envs.worker_process): its
# removal was the orchestrator's job, so with the orchestrator gone it is this process's.
OWN_TMPDIR_VARIABLE = "TORCHCANARY_OWN_TMPDIR"


def _exit_orphaned(parent: int) -> None:
    # The reader of stderr is usually the dead parent: a failed write must not stop the exit.
    with contextlib.suppress(Exception):
        sys.stderr.write(f"torchcanary: parent {parent} is gone; exiting\n")
    own = os.environ.get(OWN_TMPDIR_VARIABLE)
    if own:
        shutil.rmtree(own, ignore_errors=True)
    os._exit(1)


def _watch(parent: int) -> None:
    while True:
        time.sleep(_POLL_S)
        if os.getppid() != parent:
            _exit_orphaned(parent)


def die_with_parent() -> None:
    """Exit as soon as the process that started this one is gone."""
    expected = os.environ.get("TORCHCANARY_PARENT_PID")
    parent = int(expected) if expected else os.getppid()
    if os.getppid() != parent:
        # The parent died before we got here, or the variable leaked from a grandparent:
        # either way nobody is listening for this process's answers.
        _exit_orphaned(parent)
    threading.Thread(target=_watch, args=(parent,), name="canary-lifeline", daemon=True).start()
