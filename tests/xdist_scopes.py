"""How ``make test`` shares its tests between pytest-xdist workers.

A test that uses a cluster (Ray, Slurm) or the session's PostgreSQL server runs on the
worker that holds that part, so each part is started once and stopped after its last test
(``early_stop.py`` reads the last user from the collection, which is only right when every
user runs on one worker). Every other test goes with its module, so module fixtures are
made once. Larger scopes go out first, sized by the real parts their tests start, so the
longest ones do not start last (xdist's own ``--dist loadgroup`` cannot do this under pytest
9.2: it renames ``item._nodeid``, which 9.2 no longer reads).

Only the workers collect, so the controller learns each test's scope and weight from a file
the first worker writes at the end of its collection (``pytest_configure_node`` tells the
workers where).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

# The markers (from auto_marks.py) whose tests share one worker, in order of precedence.
SHARED_PARTS = ("ray", "slurm", "postgres")
# Rough seconds per test by the real part it starts, only to order the scopes.
WEIGHTS = {"ray": 10.0, "torch_envs": 10.0, "slurm": 2.0, "postgres": 2.0, "netns": 10.0}
PURE_WEIGHT = 0.1
_FILE_KEY = "torchcanary_scopes_file"


def scope_of(item: pytest.Item) -> tuple[str, float]:
    """The scope ``item`` runs in (a shared part's name, else its module) and its weight."""
    marks = {mark.name for mark in item.iter_markers()}
    weight = max((WEIGHTS[name] for name in marks if name in WEIGHTS), default=PURE_WEIGHT)
    shared = next((name for name in SHARED_PARTS if name in marks), None)
    return (f"shared:{shared}" if shared else item.nodeid.split("::", 1)[0]), weight


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_configure_node(node: Any) -> None:
    """Controller side: where the first worker writes the scopes."""
    node.workerinput[_FILE_KEY] = str(_scopes_file())


@pytest.hookimpl(trylast=True)  # after auto_marks.py has set the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or workerinput.get("workerid") != "gw0":
        return
    target = Path(workerinput[_FILE_KEY])
    scopes = {item.nodeid: scope_of(item) for item in items}
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(scopes))
    partial.replace(target)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedPartScheduling(LoadScopeScheduling):
        """Scopes from the first worker's file; the heaviest sent first."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self._scopes: dict[str, list[Any]] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return str(self._read()[nodeid][0])

        def _weight(self, nodeid: str) -> float:
            return float(self._read()[nodeid][1])

        def _read(self) -> dict[str, list[Any]]:
            """The first worker's file, read once (it is complete before scheduling)."""
            if self._scopes is None:
                self._scopes = json.loads(_scopes_file().read_text())
            return self._scopes

        def schedule(self) -> None:
            if self.collection is not None or not self._check_nodes_have_same_collection():
                super().schedule()  # a later call reschedules; a mismatch is reported there
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            units: dict[str, dict[str, bool]] = {}
            weight: dict[str, float] = {}
            for nodeid in self.collection:
                scope = self._split_scope(nodeid)
                units.setdefault(scope, {})[nodeid] = False
                weight[scope] = weight.get(scope, 0.0) + self._weight(nodeid)
            for scope in sorted(units, key=lambda name: -weight[name]):
                self.workqueue[scope] = units[scope]
            for node in list(self.nodes):
                if self.workqueue:
                    self._assign_work_unit(node)
                else:
                    self.assigned_work.pop(node, None)
                    node.shutdown()
            for node in self.assigned_work:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.assigned_work:
                    node.shutdown()

    return SharedPartScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without xdist
        _scopes_file().unlink(missing_ok=True)


def _scopes_file() -> Path:
    """One file per controller process, in the system's temporary folder."""
    return Path(tempfile.gettempdir()) / f"torchcanary-xdist-scopes-{os.getpid()}.json"
