"""The pytest plugin that records a suite's torch calls (``-p`` with this module's name).

With ``TORCHCANARY_RECORD_CALLS=<folder>`` set, recording starts when pytest configures and
is written when it unconfigures (or at exit). Without the variable it does nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

from torchcanary.worker.replay.record import start_from_environment

_active: list[contextlib.ExitStack] = []


def pytest_configure(config: Any) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")  # set in xdist's workers only
    stack = start_from_environment(worker)
    if stack is not None:
        _active.append(stack)


def pytest_unconfigure(config: Any) -> None:
    while _active:
        _active.pop().close()
