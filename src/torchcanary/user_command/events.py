"""Reads what a run left behind: the pytest plugin's event file, or a command's warnings.

The event file may end mid-line (the process was killed while writing); such lines are
skipped. A test that started but never reported is the one that was running when the
process died or was killed, and is recorded as crashed or timed out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from torchcanary.user_command.records import NOT_A_TEST, TestRecord, WarningRecord
from torchcanary.user_command.session import CommandOutcome

# The line Python's warnings module prints: "path:line: CategoryWarning: message".
_WARNING_LINE = re.compile(r"^(?P<location>\S.*?:\d+): (?P<category>\w*Warning): (?P<message>.*)$")
_DEPRECATION = ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning")


@dataclass(frozen=True)
class SuiteEvents:
    """One pytest run as its events tell it."""

    tests: dict[str, TestRecord]
    exitstatus: int | None  # None: the session never finished
    unfinished: str | None  # the key of the test running when the events stop
    collected: tuple[str, ...] = ()  # every test the session meant to run, in order


def read_events(path: Path, command: CommandOutcome) -> SuiteEvents:
    """The per-test records of one run; the unfinished test is blamed on how it ended."""
    tests: dict[str, TestRecord] = {}
    warnings: dict[str, list[WarningRecord]] = {}
    started: dict[str, None] = {}
    exitstatus = None
    collected: tuple[str, ...] = ()
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("event")
        if kind == "start":
            started[event["key"]] = None
        elif kind == "test":
            started.pop(event["key"], None)
            tests[event["key"]] = TestRecord(
                event["outcome"],
                float(event["duration_s"]),
                event.get("message", ""),
                event.get("longrepr", ""),
            )
        elif kind == "warning":
            warnings.setdefault(event["key"], []).append(
                WarningRecord(
                    event["category"], event["kind"], event["message"], event.get("location", "")
                )
            )
        elif kind == "collected":
            collected = tuple(event["keys"])
        elif kind == "end":
            exitstatus = int(event["exitstatus"])
    unfinished = next(reversed(started), None) if started else None
    if unfinished is not None and exitstatus is None:
        tests[unfinished] = _blame(command)
    for key, found in warnings.items():
        record = tests.get(key)
        if record is not None:
            tests[key] = TestRecord(
                record.outcome, record.duration_s, record.message, record.longrepr, tuple(found)
            )
        else:  # collection-time and session-wide warnings
            tests[key] = TestRecord(NOT_A_TEST, 0.0, warnings=tuple(found))
    return SuiteEvents(tests, exitstatus, unfinished, collected)


def _blame(command: CommandOutcome) -> TestRecord:
    if command.status == "timeout":
        return TestRecord(
            "timeout",
            command.duration_s,
            f"the run was killed after its {command.duration_s:.0f} s timeout while this test ran",
        )
    if command.status == "signalled":
        how = command.describe()
    else:
        how = f"exited with status {command.exit_code}"
    tail = command.stderr_tail.strip().splitlines()[-20:]
    return TestRecord(
        "crashed", 0.0, f"the test process {how} while this test ran", "\n".join(tail)
    )


def command_warnings(stderr: str) -> tuple[WarningRecord, ...]:
    """Warnings a plain command printed, as Python's default warning display writes them."""
    found = []
    for line in stderr.splitlines():
        match = _WARNING_LINE.match(line)
        if match:
            category = match["category"]
            kind = (
                "deprecation"
                if category in _DEPRECATION
                else "user"
                if category == "UserWarning"
                else "other"
            )
            found.append(WarningRecord(category, kind, match["message"], match["location"]))
    return tuple(dict.fromkeys(found))
