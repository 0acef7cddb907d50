"""Session fixtures stopped as soon as the last test that uses them has finished.

A session fixture lives until the session ends: a Ray cluster started for the fleet modules
would stay up, idle, through every module after them, taking memory and CPU from their
tests. A fixture registers its stop with ``stop_after_last_use``; this plugin calls it when
the module of the last collected test that uses the fixture ends (after that module's own
fixtures, which may hold it, are gone), and the fixture's own teardown then finds it
done. Where that test does not run in this process (pytest-xdist hands it to another
worker), the fixture stops at the session's end, as before.

Registered by ``tests/conftest.py`` (``pytest_plugins``). PYTEST_DONT_REWRITE: it holds no
assert, and the conftest imports it before pytest would register it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest


class _Plan:
    """One session's stops (fixture name -> its stop, in start order) and, per fixture,
    the id of the last test to run that uses it."""

    def __init__(self) -> None:
        self.stops: dict[str, Callable[[], None]] = {}
        self.last_user: dict[str, str] = {}


_plan_key = pytest.StashKey[_Plan]()


def stop_after_last_use(
    request: pytest.FixtureRequest, stop: Callable[[], None]
) -> Callable[[], None]:
    """``stop``, to be called by the session fixture of ``request`` at its end, made to run
    once: after the last test that uses the fixture, or then, whichever comes first."""
    plan = request.config.stash.setdefault(_plan_key, _Plan())
    fixture = request.fixturename
    done = False

    def stop_once() -> None:
        nonlocal done
        if not done:
            done = True
            plan.stops.pop(fixture, None)
            stop()

    plan.stops[fixture] = stop_once
    return stop_once


def pytest_collection_finish(session: pytest.Session) -> None:
    plan = session.config.stash.setdefault(_plan_key, _Plan())
    for item in session.items:  # the tests to run, in order, after any deselection
        for name in getattr(item, "fixturenames", ()):
            plan.last_user[name] = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    yield  # the test's own fixtures (module ones too, when its module ends) first
    plan = item.config.stash.get(_plan_key, None)
    module = _module(item.nodeid)
    if plan is None or (nextitem is not None and _module(nextitem.nodeid) == module):
        return  # a module fixture may still hold the session fixture until its module ends
    # Newest first: a fixture started after another may use it (the fleet uses the cluster).
    for fixture in reversed(list(plan.stops)):
        if _module(plan.last_user.get(fixture, "")) == module:
            plan.stops[fixture]()


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]
