"""The pytest plugin torchcanary loads into a user's run (``-p`` with this module's name).

It writes one JSON line per event to the file named by ``TORCHCANARY_STACK_EVENTS``, flushed
at once, so a run that crashes or is killed mid-test still tells which tests finished and
which one was running. Events: ``session``, ``collected`` (the keys that will run), ``start``
(a test began), ``test`` (its outcome, duration and failure text), ``warning`` (category and
message, per test) and ``end``. With ``TORCHCANARY_STACK_TEST_TIMEOUT`` set, a test still
running after that many seconds is recorded as ``timeout`` with every thread's stack, and the
process exits at once with ``TEST_TIMEOUT_EXIT``: a hung test cannot be unwound safely, so
the orchestrator starts pytest again for the tests not reached.
``TORCHCANARY_STACK_SELECT`` names a JSON list of test keys; only those run (the re-runs
that tell a deterministic break from a flaky one go through the user's own command line,
conftest files and options this way). A test's key is its node id, except that a file under
a site-packages directory is named relative to it, so the two environments' installed copies
of a package (``--pyargs``) share keys. Without the variables it does nothing. It runs
inside the user's environment: standard library and pytest only.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import IO, Any

EVENTS_VAR = "TORCHCANARY_STACK_EVENTS"
SELECT_VAR = "TORCHCANARY_STACK_SELECT"
TEST_TIMEOUT_VAR = "TORCHCANARY_STACK_TEST_TIMEOUT"
TEST_TIMEOUT_EXIT = 86  # pytest's own codes stop at 5; 86 says "our watchdog stopped it"
SESSION_KEY = "(session)"
_MAX_TEXT = 4000


def warning_kind(category: type[Warning]) -> str:
    """deprecation, user or other: the families a report cares about."""
    if issubclass(category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning)):
        return "deprecation"
    if issubclass(category, UserWarning):
        return "user"
    return "other"


class _Recorder:
    """Turns pytest's hooks into events; registered once per session by pytest_configure."""

    def __init__(
        self,
        config: Any,
        events_path: str | None,
        selected: set[str] | None,
        test_timeout_s: float = 0.0,
    ) -> None:
        self._root = Path(str(getattr(config, "rootpath", None) or config.rootdir))
        self._sites = sorted(
            {os.path.normpath(p) for p in sys.path if p.rstrip(os.sep).endswith("site-packages")},
            key=len,
            reverse=True,
        )
        self._file: IO[str] | None = None
        if events_path:
            self._file = open(events_path, "a", encoding="utf-8")  # noqa: SIM115 - unconfigure
        self._selected = selected
        self._tests: dict[str, dict[str, Any]] = {}
        self._test_timeout_s = test_timeout_s
        self._watchdog: threading.Timer | None = None
        self._lock = threading.Lock()  # the watchdog thread writes events too

    def key(self, nodeid: str) -> str:
        path_part, sep, rest = nodeid.partition("::")
        if not path_part:
            return nodeid or SESSION_KEY
        absolute = os.path.normpath(os.path.join(self._root, path_part))
        for site in self._sites:
            if absolute.startswith(site + os.sep):
                return "<site-packages>/" + os.path.relpath(absolute, site) + sep + rest
        return nodeid

    def _emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write(json.dumps(event, default=str) + "\n")
                self._file.flush()

    def _expire(self, nodeid: str) -> None:
        """The watchdog: record the hung test with every thread's stack, then stop the process."""
        with tempfile.TemporaryFile("w+") as stacks:
            faulthandler.dump_traceback(stacks, all_threads=True)
            stacks.seek(0)
            where = stacks.read()[-_MAX_TEXT:]
        self._emit(
            {
                "event": "test",
                "key": self.key(nodeid),
                "nodeid": nodeid,
                "phase": "run",
                "outcome": "timeout",
                "duration_s": self._test_timeout_s,
                "message": f"still running after the {self._test_timeout_s:g} s test timeout; "
                "the test process was stopped and the tests after it run in a new one",
                "longrepr": where,
            }
        )
        sys.stderr.write(f"torchcanary: {nodeid} timed out; stacks:\n{where}\n")
        sys.stderr.flush()
        os._exit(TEST_TIMEOUT_EXIT)

    def pytest_sessionstart(self, session: Any) -> None:
        import pytest

        self._emit(
            {
                "event": "session",
                "pytest": pytest.__version__,
                "python": sys.version.split()[0],
                "time": time.time(),
            }
        )

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self._selected is None:
            return
        keep = [item for item in items if self.key(item.nodeid) in self._selected]
        dropped = [item for item in items if self.key(item.nodeid) not in self._selected]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def pytest_collection_finish(self, session: Any) -> None:
        keys = [self.key(item.nodeid) for item in session.items]
        self._emit({"event": "collected", "keys": keys})

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed or report.skipped:
            self._emit(
                {
                    "event": "test",
                    "key": self.key(report.nodeid),
                    "nodeid": report.nodeid,
                    "phase": "collect",
                    "outcome": "error" if report.failed else "skipped",
                    "duration_s": 0.0,
                    "message": _message(report),
                    "longrepr": _text(report),
                }
            )

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._tests[nodeid] = {
            "outcome": "passed",
            "duration_s": 0.0,
            "message": "",
            "longrepr": "",
        }
        self._emit({"event": "start", "key": self.key(nodeid)})
        if self._test_timeout_s > 0:
            self._watchdog = threading.Timer(self._test_timeout_s, self._expire, (nodeid,))
            self._watchdog.daemon = True
            self._watchdog.start()

    def pytest_runtest_logreport(self, report: Any) -> None:
        state = self._tests.setdefault(
            report.nodeid, {"outcome": "passed", "duration_s": 0.0, "message": "", "longrepr": ""}
        )
        state["duration_s"] += float(getattr(report, "duration", 0.0) or 0.0)
        expected_failure = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                state["outcome"] = "xpassed" if expected_failure else "passed"
            elif report.skipped:
                state["outcome"] = "xfailed" if expected_failure else "skipped"
            else:
                state["outcome"] = "failed"
        elif report.failed:  # setup or teardown broke: an error, unless the call failed
            if state["outcome"] != "failed":
                state["outcome"] = "error"
        elif report.skipped and report.when == "setup":
            state["outcome"] = "xfailed" if expected_failure else "skipped"
        if not report.passed and not state["message"]:
            state["message"] = _message(report)
            state["longrepr"] = _text(report)

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        state = self._tests.pop(nodeid, None)
        if state is not None:
            self._emit(
                {
                    "event": "test",
                    "key": self.key(nodeid),
                    "nodeid": nodeid,
                    "phase": "run",
                    **state,
                }
            )

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, when: str, nodeid: str, location: Any
    ) -> None:
        category = warning_message.category
        self._emit(
            {
                "event": "warning",
                "key": self.key(nodeid) if nodeid else SESSION_KEY,
                "when": when,
                "category": category.__name__,
                "kind": warning_kind(category),
                "message": str(warning_message.message)[:500],
                "location": f"{warning_message.filename}:{warning_message.lineno}",
            }
        )

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self._emit({"event": "end", "exitstatus": int(exitstatus), "time": time.time()})

    def pytest_unconfigure(self, config: Any) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _message(report: Any) -> str:
    """The one-line reason: the crash message, or a skip's reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])[:500]
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:500]
    text = _text(report).strip().splitlines()
    return text[-1][:500] if text else ""


def _text(report: Any) -> str:
    """The end of the failure text, where the assertion and error lines are."""
    try:
        return str(report.longreprtext)[-_MAX_TEXT:]
    except Exception:  # a plugin's odd longrepr must not break the run
        return ""


def pytest_configure(config: Any) -> None:
    events_path = os.environ.get(EVENTS_VAR)
    select_path = os.environ.get(SELECT_VAR)
    if not events_path and not select_path:
        return
    selected = set(json.loads(Path(select_path).read_text())) if select_path else None
    # xdist workers only filter; their reports reach the controller, which records them.
    if hasattr(config, "workerinput"):
        events_path = None
    timeout_s = float(os.environ.get(TEST_TIMEOUT_VAR) or 0)
    config.pluginmanager.register(
        _Recorder(config, events_path, selected, timeout_s), "torchcanary-stack-recorder"
    )
