"""Where the suite's time goes: a total per kind of real part and per test module.

Each test's time is its setup, call and teardown together, so a cluster or environment
a fixture starts counts against the first test that asked for it. The kind is the most
expensive real part among the test's markers (set from its fixtures by ``auto_marks.py``).
The terminal summary prints both tables; ``--suite-times=PATH`` also writes them, with every
test's time, as JSON. ``python tests/suite_time.py JUNIT.xml KINDS.json`` makes the same
tables from another run's JUnit XML (``KINDS.json`` from a ``--collect-only`` run with
``--suite-times``), for a before/after comparison.

Registered by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

# Most expensive first: a test is counted under the first of these among its markers.
KINDS = (
    ("slurm", "Slurm"),
    ("ray", "Ray"),
    ("netns", "network namespaces"),
    ("browser", "browser"),
    ("postgres", "PostgreSQL"),
    ("torch_envs", "torch workers"),
)
PURE_LOGIC = "pure logic"


def kind_of(marker_names: Iterable[str]) -> str:
    names = set(marker_names)
    return next((kind for marker, kind in KINDS if marker in names), PURE_LOGIC)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-times",
        metavar="PATH",
        help="write each test's time and kind, and the totals per kind and module, as JSON",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTimes(config.getoption("suite_times")), "suite-times")


class SuiteTimes:
    """Adds up each test's phases; under pytest-xdist the workers' reports arrive here too."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.times: dict[str, float] = defaultdict(float)
        self.kinds: dict[str, str] = {}

    @pytest.hookimpl(trylast=True)  # after auto_marks has set the markers
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.kinds[item.nodeid] = kind_of(mark.name for mark in item.iter_markers())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.times[report.nodeid] += report.duration
        self.kinds.setdefault(report.nodeid, kind_of(report.keywords))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        table = totals(self.times, self.kinds)
        if self.path:
            tests = [
                {"nodeid": nodeid, "kind": kind, "seconds": self.times.get(nodeid)}
                for nodeid, kind in self.kinds.items()
            ]
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            Path(self.path).write_text(json.dumps({"tests": tests, **table}, indent=1) + "\n")
        if self.times:
            terminalreporter.write_sep("=", "time per kind of real part and per module")
            for line in table_lines(table):
                terminalreporter.write_line(line)


def totals(times: Mapping[str, float], kinds: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Seconds and test counts per kind and per module, from per-test seconds."""
    by_kind: dict[str, float] = defaultdict(float)
    kind_count: dict[str, float] = defaultdict(float)
    by_module: dict[str, float] = defaultdict(float)
    for nodeid, seconds in times.items():
        kind = kinds.get(nodeid, PURE_LOGIC)
        by_kind[kind] += seconds
        kind_count[kind] += 1
        by_module[nodeid.split("::")[0]] += seconds
    return {"kind_seconds": by_kind, "kind_tests": kind_count, "module_seconds": by_module}


def table_lines(table: Mapping[str, Mapping[str, float]]) -> list[str]:
    kind_seconds, kind_tests = table["kind_seconds"], table["kind_tests"]
    total = sum(kind_seconds.values())
    lines = [f"{'kind of real part':<22}{'tests':>6}{'seconds':>10}{'share':>7}"]
    for kind in [k for _, k in KINDS] + [PURE_LOGIC]:
        if kind in kind_tests:
            seconds = kind_seconds[kind]
            share = seconds / total if total else 0.0
            lines.append(f"{kind:<22}{kind_tests[kind]:>6.0f}{seconds:>10.1f}{share:>7.0%}")
    lines.append(f"{'total':<22}{sum(kind_tests.values()):>6.0f}{total:>10.1f}")
    lines.append("")
    lines.append("seconds per test module, slowest first:")
    modules = sorted(table["module_seconds"].items(), key=lambda pair: -pair[1])
    lines += [f"{seconds:>9.1f}  {module}" for module, seconds in modules]
    return lines


def junit_times(junit: Path) -> dict[str, float]:
    """nodeid -> seconds from pytest's JUnit XML (``classname`` is the dotted module path)."""
    times: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = classname.split(".")
        # tests.test_x.TestClass -> tests/test_x.py::TestClass
        for cut in range(len(parts), 0, -1):
            if parts[cut - 1].startswith("test_"):
                module = "/".join(parts[:cut]) + ".py"
                nodeid = "::".join([module, *parts[cut:], name])
                break
        else:
            nodeid = f"{classname}::{name}"
        times[nodeid] = times.get(nodeid, 0.0) + float(case.get("time", 0.0))
    return times


if __name__ == "__main__":
    junit_path, kinds_path = Path(sys.argv[1]), Path(sys.argv[2])
    known = {t["nodeid"]: t["kind"] for t in json.loads(kinds_path.read_text())["tests"]}
    print("\n".join(table_lines(totals(junit_times(junit_path), known))))
