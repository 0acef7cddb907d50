"""The plain data of a stack run: per-test records and one environment's whole run.

Kept in JSON as a store artifact per environment, so a resumed run can diff against an
environment that already finished, and so a report can be rendered again later.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from torchcanary.user_command.session import CommandOutcome

PASSING = frozenset({"passed", "xfailed", "xpassed"})
FAILING = frozenset({"failed"})
BROKEN = frozenset({"error", "crashed", "timeout"})
SKIPPED = frozenset({"skipped"})
NOT_A_TEST = "not-a-test"  # a key that only carries warnings (collection, session)
COMMAND_KEY = "command"  # the one record of a command that is not pytest

_VOLATILE = (
    (re.compile(r"0x[0-9a-fA-F]{4,}"), "0x…"),  # object addresses
    (re.compile(r"\b\d+(\.\d+)?\s?(s|ms|sec|seconds)\b"), "<time>"),
)


def normalise(text: str, paths: tuple[str, ...] = ()) -> str:
    """``text`` without what differs between two runs for no reason: paths, addresses, times."""
    for path in sorted(paths, key=len, reverse=True):
        if path:
            text = text.replace(path, "<env>")
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


@dataclass(frozen=True)
class WarningRecord:
    category: str
    kind: str  # deprecation, user, other
    message: str
    location: str = ""

    def signature(self) -> tuple[str, str]:
        """What makes two warnings the same: category and message, addresses and digits aside."""
        return self.category, re.sub(r"\d+", "N", normalise(self.message))


@dataclass(frozen=True)
class TestRecord:
    """One test's outcome in one run; ``outcome`` is one of pytest's words or crashed/timeout."""

    __test__ = False  # not a test class, whatever pytest guesses from the name

    outcome: str
    duration_s: float
    message: str = ""
    longrepr: str = ""
    warnings: tuple[WarningRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestRecord:
        return cls(
            data["outcome"],
            float(data["duration_s"]),
            data.get("message", ""),
            data.get("longrepr", ""),
            tuple(WarningRecord(**w) for w in data.get("warnings", ())),
        )


@dataclass(frozen=True)
class InstallOutcome:
    """How installing the user's project and extras into one environment's overlay went."""

    ok: bool
    requirements: list[str]
    duration_s: float = 0.0
    error: str = ""
    log_path: str = ""


@dataclass(frozen=True)
class EnvRun:
    """One environment's main run of the user's command.

    ``status``: passed, failed, crashed, timeout, not-found, install-failed, pytest-error
    (pytest itself failed: usage or internal error, interrupted) or no-tests.
    """

    role: str
    torch_version: str
    status: str
    detail: str
    install: InstallOutcome
    command: CommandOutcome | None = None
    pytest: bool = False
    tests: dict[str, TestRecord] = field(default_factory=dict)
    warnings: tuple[WarningRecord, ...] = ()  # a plain command's, read from its stderr
    numerics_dir: str = ""
    volatile_paths: tuple[str, ...] = ()  # this environment's own paths, masked in diffs

    @property
    def ran(self) -> bool:
        return self.status not in ("install-failed", "not-found")

    @property
    def ended_normally(self) -> bool:
        return self.status in ("passed", "failed")

    def outcome_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.tests.values():
            if record.outcome == NOT_A_TEST:
                continue
            counts[record.outcome] = counts.get(record.outcome, 0) + 1
        return dict(sorted(counts.items()))

    def summary(self) -> dict[str, Any]:
        """The per-environment summary row's payload: counts and how the command ended."""
        command = self.command
        return {
            "torch_version": self.torch_version,
            "status": self.status,
            "detail": self.detail,
            "install": asdict(self.install),
            "pytest": self.pytest,
            "tests": sum(self.outcome_counts().values()),
            "outcomes": self.outcome_counts(),
            "argv": command.argv if command else [],
            "exit_code": command.exit_code if command else None,
            "duration_s": command.duration_s if command else 0.0,
            "output_bytes": command.output_bytes if command else 0,
            "log_truncated": command.log_truncated if command else False,
            "log_path": command.log_path if command else "",
            "stragglers": command.stragglers if command else [],
            "stdout_tail": command.stdout_tail[-4000:] if command else "",
            "stderr_tail": command.stderr_tail[-4000:] if command else "",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "torch_version": self.torch_version,
            "status": self.status,
            "detail": self.detail,
            "install": asdict(self.install),
            "command": self.command.to_json() if self.command else None,
            "pytest": self.pytest,
            "tests": {key: record.to_json() for key, record in self.tests.items()},
            "warnings": [asdict(w) for w in self.warnings],
            "numerics_dir": self.numerics_dir,
            "volatile_paths": list(self.volatile_paths),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvRun:
        command = data.get("command")
        return cls(
            data["role"],
            data["torch_version"],
            data["status"],
            data["detail"],
            InstallOutcome(**data["install"]),
            CommandOutcome.from_json(command) if command else None,
            bool(data.get("pytest")),
            {key: TestRecord.from_json(r) for key, r in data.get("tests", {}).items()},
            tuple(WarningRecord(**w) for w in data.get("warnings", ())),
            data.get("numerics_dir", ""),
            tuple(data.get("volatile_paths", ())),
        )
