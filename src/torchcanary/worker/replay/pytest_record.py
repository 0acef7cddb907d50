"""The pytest plugin that records a suite's torch calls (``-p`` with this module's name).

With ``TORCHCANARY_RECORD_CALLS=<folder>`` set, recording starts when pytest configures and
is written when it unconfigures (or at exit). Without the variable it does nothing. Each
test's start wakes a recorder that rests (``record.QUIET``): a new test is where new calls
are most likely.
"""

from __future__ import annotations

from typing import Any

from torchcanary.worker.replay.record import Started, start_from_environment

_active: list[Started] = []


def pytest_configure(config: Any) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")  # set in xdist's workers only
    started = start_from_environment(worker)
    if started is not None:
        _active.append(started)


def pytest_runtest_setup(item: Any) -> None:
    for started in _active:
        started.recording.wake()


def pytest_unconfigure(config: Any) -> None:
    while _active:
        _active.pop().stack.close()
