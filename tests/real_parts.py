"""Tests that could not use a real part (PostgreSQL, Ray, Slurm, network namespaces, Chromium),
and skips under CI.

Such a test skips with a reason beginning "not checked". On a developer's machine that is
an honest unknown; under CI (``CI=true``, which ``.ci/run`` sets itself), where ``make test``
installs every part, it means the build checked less than it says, so there the skip becomes
a failure naming the part. In every mode the terminal summary counts them in one line,
grouped by reason. Under CI any other skip fails too, unless it is on ``ALLOWED_SKIPS``
below, with why CI may skip it.

Registered by ``tests/conftest.py`` (``pytest_plugins``); a pytest run elsewhere loads it
with ``-p real_parts``. PYTEST_DONT_REWRITE: it holds no assert, and the conftest imports
it before pytest would register it.
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from collections.abc import Generator
from types import ModuleType

import pytest

NOT_CHECKED = "not checked"
FIX = "`make test` installs every real part (Makefile: setup-dev, browser, postgres, netns, slurm)"
_not_checked_key = pytest.StashKey[list[str]]()

# The skips CI accepts: (the start of the test's id, the start of its reason) -> why a
# clean CI machine may skip it. Short on purpose: each entry is a check CI does not make.
ALLOWED_SKIPS: dict[tuple[str, str], str] = {}


def under_ci() -> bool:
    """Whether this run is CI's: ``CI`` is set to true (as GitHub, GitLab and others do)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require_module(module: str, part: str, fix: str) -> ModuleType:
    """``module`` imported, or the test skipped as not checked, naming ``part`` and ``fix``.

    ``pytest.importorskip`` would skip with a reason that this plugin cannot tell apart
    from any other skip, so a missing Ray would pass CI unseen.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(f"{NOT_CHECKED}: {part} is not installed ({exc}); {fix}")


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason of a skip (an expected failure is none); None for any other report."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    if not isinstance(report.longrepr, tuple):
        return None
    return str(report.longrepr[2]).removeprefix("Skipped: ")


def not_checked_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason of a skip for a missing real part; None for any other report."""
    reason = skip_reason(report)
    return reason if reason is not None and reason.startswith(NOT_CHECKED) else None


def allowed_skip(nodeid: str, reason: str) -> bool:
    """Whether CI accepts this skip (it is on ``ALLOWED_SKIPS``)."""
    return any(
        nodeid.startswith(test) and reason.startswith(why_prefix)
        for test, why_prefix in ALLOWED_SKIPS
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_not_checked_key] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _judge(item.config, report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _judge(collector.config, report)
    return report


def _judge(config: pytest.Config, report: pytest.TestReport | pytest.CollectReport) -> None:
    """Count a not-checked skip; under CI, make it (and any skip not allowed) a failure that
    says what was missing."""
    reason = skip_reason(report)
    if reason is None:
        return
    if reason.startswith(NOT_CHECKED):
        config.stash[_not_checked_key].append(reason)
        if under_ci():
            report.outcome = "failed"
            report.longrepr = (
                f"CI=true, and this test could not use a real part: {_why(reason)}. {FIX}"
            )
    elif under_ci() and not allowed_skip(report.nodeid, reason):
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true, and this test skipped ({reason}): under CI every test checks, or is "
            "on ALLOWED_SKIPS in tests/real_parts.py with why"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line: how many tests did not check a real part, and why (most common first)."""
    reasons = terminalreporter.config.stash.get(_not_checked_key, [])
    counts = Counter(_why(reason) for reason in reasons)
    grouped = "; ".join(f"{why} ({count})" for why, count in counts.most_common())
    line = f"{len(reasons)} real-part tests not checked"
    terminalreporter.write_line(f"{line}: {grouped}" if reasons else line)


def _why(reason: str) -> str:
    return reason.removeprefix(NOT_CHECKED).lstrip(": ")
