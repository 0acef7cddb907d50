"""Where the suite's time goes: a total per kind of real part and per test module.

Each test's time is its setup, call and teardown together, so a cluster or environment
a fixture starts counts against the first test that asked for it. Beside the wall time,
the CPU time the test's own process and the children it waited for used (workers, drill
ranks, scripts; not servers that outlive it, such as Ray's, Slurm's or PostgreSQL's): on
a machine whose CPUs the suite keeps busy, that, not the wall time a test spent waiting,
is what a change must cut. The kind is the most expensive real part among the test's
markers (set from its fixtures by ``auto_marks.py``).
The terminal summary prints both tables, then how busy the machine's CPUs were over the
session (from ``/proc/stat``, so Ray's, Slurm's and PostgreSQL's servers count too): when
they were busy throughout, the wall time cannot drop below that CPU work over the number
of CPUs, whatever the scheduling. ``--suite-times=PATH`` also writes the tables, with every
test's time, as JSON. ``python tests/suite_time.py JUNIT.xml KINDS.json`` makes the same
tables from another run's JUnit XML (``KINDS.json`` from a ``--collect-only`` run with
``--suite-times``), for a before/after comparison.

Registered by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
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
# The name a test report carries its CPU seconds under (``report.user_properties``): it
# travels from a pytest-xdist worker to the controller with the report.
CPU_PROPERTY = "cpu_s"


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


def cpu_seconds() -> float:
    """User and system CPU of this process and of every child it has waited for."""
    own, waited = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def machine_cpu_seconds() -> tuple[float, float] | None:
    """Busy and idle CPU seconds of the whole machine since boot, summed over its CPUs
    (Linux ``/proc/stat``); None where there is no such file. Time a hypervisor gave to
    other guests (steal) is neither: this machine could not use it."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(value) for value in fields] + [0] * 7
    user, nice, system, idle, iowait, irq, softirq = ticks[:7]
    per_second = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / per_second, (idle + iowait) / per_second


def machine_line(start: tuple[float, float], end: tuple[float, float], wall_s: float) -> str:
    """How much of the machine's CPU time the session kept busy, and the wall time that
    CPU work needs at the least on this many CPUs."""
    busy, idle = end[0] - start[0], end[1] - start[1]
    cpus = os.cpu_count() or 1
    share = busy / (busy + idle) if busy + idle else 0.0
    return (
        f"the machine's {cpus} CPUs: {busy:.0f} CPU s busy of {busy + idle:.0f} ({share:.0%}) "
        f"in {wall_s:.0f} s; that work alone needs {busy / cpus / 60:.1f} minutes on {cpus}"
    )


class SuiteTimes:
    """Adds up each test's phases; under pytest-xdist the workers' reports arrive here too."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.times: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.kinds: dict[str, str] = {}
        self._cpu_mark = cpu_seconds()
        self._machine_start = machine_cpu_seconds()
        self._wall_start = time.monotonic()

    @pytest.hookimpl(trylast=True)  # after auto_marks has set the markers
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.kinds[item.nodeid] = kind_of(mark.name for mark in item.iter_markers())

    def pytest_runtest_logstart(self) -> None:
        self._cpu_mark = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self) -> Iterator[None]:
        """Where the test runs (a worker, under pytest-xdist): the phase's CPU seconds,
        on its report. A list of its own: the item's is shared by its three reports."""
        outcome = yield
        report = outcome.get_result()
        now = cpu_seconds()
        report.user_properties = [*report.user_properties, (CPU_PROPERTY, now - self._cpu_mark)]
        self._cpu_mark = now

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.times[report.nodeid] += report.duration
        self.cpu[report.nodeid] += sum(v for k, v in report.user_properties if k == CPU_PROPERTY)
        self.kinds.setdefault(report.nodeid, kind_of(report.keywords))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        table = totals(self.times, self.kinds, self.cpu)
        if self.path:
            tests = [
                {
                    "nodeid": nodeid,
                    "kind": kind,
                    "seconds": self.times.get(nodeid),
                    "cpu_seconds": self.cpu.get(nodeid),
                }
                for nodeid, kind in self.kinds.items()
            ]
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            Path(self.path).write_text(json.dumps({"tests": tests, **table}, indent=1) + "\n")
        if self.times:
            terminalreporter.write_sep("=", "time per kind of real part and per module")
            for line in table_lines(table):
                terminalreporter.write_line(line)
            machine_end = machine_cpu_seconds()
            if self._machine_start is not None and machine_end is not None:
                wall_s = time.monotonic() - self._wall_start
                terminalreporter.write_line(machine_line(self._machine_start, machine_end, wall_s))


def totals(
    times: Mapping[str, float], kinds: Mapping[str, str], cpu: Mapping[str, float] | None = None
) -> dict[str, dict[str, float]]:
    """Seconds, CPU seconds (where known) and test counts per kind and per module, from
    per-test figures."""
    names = ("kind_seconds", "kind_tests", "module_seconds")
    names += () if cpu is None else ("kind_cpu", "module_cpu")  # JUnit XML has no CPU
    table: dict[str, dict[str, float]] = {name: defaultdict(float) for name in names}
    for nodeid, seconds in times.items():
        kind, module = kinds.get(nodeid, PURE_LOGIC), nodeid.split("::")[0]
        table["kind_seconds"][kind] += seconds
        table["kind_tests"][kind] += 1
        table["module_seconds"][module] += seconds
        if cpu is not None:
            table["kind_cpu"][kind] += cpu.get(nodeid, 0.0)
            table["module_cpu"][module] += cpu.get(nodeid, 0.0)
    return table


def table_lines(table: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The two tables; with CPU seconds where the run measured them, and the modules then
    ordered by CPU, the figure to cut when the CPUs are the bottleneck."""
    kind_seconds, kind_tests = table["kind_seconds"], table["kind_tests"]
    kind_cpu, module_cpu = table.get("kind_cpu"), table.get("module_cpu")

    def cpu_text(figures: Mapping[str, float] | None, key: str) -> str:
        return "" if figures is None else f"{figures.get(key, 0.0):>10.1f}"

    total = sum(kind_seconds.values())
    cpu_head = "" if kind_cpu is None else f"{'CPU s':>10}"
    lines = [f"{'kind of real part':<22}{'tests':>6}{'seconds':>10}{'share':>7}{cpu_head}"]
    for kind in [k for _, k in KINDS] + [PURE_LOGIC]:
        if kind in kind_tests:
            seconds = kind_seconds[kind]
            share = seconds / total if total else 0.0
            lines.append(
                f"{kind:<22}{kind_tests[kind]:>6.0f}{seconds:>10.1f}{share:>7.0%}"
                + cpu_text(kind_cpu, kind)
            )
    total_cpu = "" if kind_cpu is None else f"{sum(kind_cpu.values()):>10.1f}"
    lines.append(f"{'total':<22}{sum(kind_tests.values()):>6.0f}{total:>10.1f}{'':>7}{total_cpu}")
    lines.append("")
    if module_cpu is None:
        lines.append("seconds per test module, slowest first:")
        modules = sorted(table["module_seconds"].items(), key=lambda pair: -pair[1])
        lines += [f"{seconds:>9.1f}  {module}" for module, seconds in modules]
        return lines
    lines.append("seconds and CPU seconds per test module, most CPU first:")
    modules = sorted(table["module_seconds"].items(), key=lambda pair: -module_cpu[pair[0]])
    lines += [f"{seconds:>9.1f}{module_cpu[module]:>9.1f}  {module}" for module, seconds in modules]
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
