"""Where a command's CPU goes: each process it starts, by kind and by the test it ran under.

The suite is CPU-bound on two cores (a third xdist worker made it slower), so its wall time
follows the CPU its processes burn, and ``tests/suite_time.py``'s per-test seconds do not say
which processes burned it. This runs a command while sampling ``/proc`` every 0.2 s: each
process's user and system time, its command line, and the test it was started under
(``PYTEST_CURRENT_TEST``, which pytest sets and children inherit). It prints the CPU seconds
per kind of process (a torchcanary worker, a drill's job, torchrun, a compiler, ...) and per
test. What runs on a Ray node inherits the environment of that node's raylet, not of the
test that sent it: a module's cluster is charged to the test that started it, with every
later test's work on it. Usage:

    python benchmarks/suite_cpu.py -- .venv/bin/python -m pytest -q -n 2 -m torch_envs
    python benchmarks/suite_cpu.py --top 40 --json cpu.json -- make test

Every process on the machine is counted (servers started outside the command too, for the
CPU they use while it runs, not what they had used before), so run it on an otherwise idle
machine. A process that lives under 0.2 s can be missed, and a process's CPU is what it had
used when last seen (its final 0.2 s may be lost); both are small beside the 1.5 to 2 s of
CPU each ``import torch`` costs here, which is what this is for.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# Paths and JSON arguments vary per test; the kind is the command without them.
VARYING = re.compile(r"(/tmp|/root|/work|/home)/\S*|\{.*")
# The kinds worth their own line, tried in order: (what the command line contains, name).
KINDS = (
    ("-m torchcanary.worker.drill.", "drill job or helper (torchcanary.worker.drill.*)"),
    ("-m torchcanary.worker.", "torchcanary worker module (torchcanary.worker.*)"),
    ("-m torchcanary.worker", "torchcanary worker (-m torchcanary.worker)"),
    ("torch.distributed.run", "torchrun agent"),
    ("cc1plus", "C++ compiler (Inductor)"),
    ("torchcanary.cli", "torchcanary command line"),
    ("pytest", "pytest"),
    ("ray", "Ray"),
    ("slurm", "Slurm"),
    ("postgres", "PostgreSQL"),
    ("chrom", "Chromium"),
)


@dataclass
class Seen:
    """One process as last sampled, and the CPU it had used before the command started
    (a server or the machine's init that was already running: only its share counts)."""

    cpu_s: float
    command: str
    test: str
    before_s: float = 0.0

    @property
    def during_s(self) -> float:
        return self.cpu_s - self.before_s


def _read(pid: str) -> tuple[str, float] | None:
    """The process's start time (its identity with the pid) and CPU seconds so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19], (int(fields[11]) + int(fields[12])) / TICKS


def _first_look(pid: str) -> tuple[str, str]:
    """Its command line and the pytest test it inherited, read once."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, UnicodeDecodeError):
        return "", ""
    test = next((item[20:] for item in environ if item.startswith(b"PYTEST_CURRENT_TEST=")), b"")
    return command.strip(), test.decode(errors="replace").split(" (")[0]


def look(seen: dict[str, Seen], me: int, before: bool = False) -> None:
    """Each live process's CPU, keyed by pid and start time; ``before``: as the baseline."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        read = _read(pid)
        if read is None:
            continue
        key = f"{pid}:{read[0]}"
        if key in seen:
            seen[key].cpu_s = read[1]
        else:
            seen[key] = Seen(read[1], *_first_look(pid), before_s=read[1] if before else 0.0)


def sample(seen: dict[str, Seen], stop: threading.Event, me: int) -> None:
    """Every 0.2 s until ``stop``."""
    while not stop.is_set():
        look(seen, me)
        stop.wait(0.2)


def kind_of(command: str) -> str:
    for needle, name in KINDS:
        if needle in command:
            return name
    shown = VARYING.sub("P", command)[:70]
    return f"other: {shown}" if shown else "other (kernel threads, exited before read)"


def table(rows: dict[str, list[float]], top: int, title: str) -> list[str]:
    total = sum(cpu for cpu, _ in rows.values())
    lines = [f"{title}: {total:.0f} s of CPU", f"{'CPU s':>8} {'share':>6} {'procs':>6}  name"]
    for name, (cpu, count) in sorted(rows.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {cpu / max(total, 1e-9):6.0%} {count:6.0f}  {name}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="lines per table (default 25)")
    parser.add_argument("--json", type=Path, help="also write every process seen, as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --, e.g. -- make test")
    seen: dict[str, Seen] = {}
    look(seen, os.getpid(), before=True)
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, stop, os.getpid()), daemon=True)
    started = time.monotonic()
    sampler.start()
    code = subprocess.run(command).returncode
    stop.set()
    sampler.join()
    wall = time.monotonic() - started
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_test: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for process in seen.values():
        for rows, name in ((by_kind, kind_of(process.command)), (by_test, process.test)):
            rows[name][0] += process.during_s
            rows[name][1] += 1
    by_test["(no test: pytest itself, servers, the machine)"] = by_test.pop("", [0.0, 0])
    cpus = len(os.sched_getaffinity(0))
    print(f"{shlex.join(command)}: exit {code}, {wall:.0f} s wall, {cpus} CPUs")
    busy = sum(p.during_s for p in seen.values())
    print(f"busy: {busy:.0f} CPU s of the {wall * cpus:.0f} its wall time held")
    print("\n".join(table(by_kind, args.top, "by kind of process")))
    print()
    print("\n".join(table(by_test, args.top, "by the test each process started under")))
    if args.json:
        args.json.write_text(json.dumps({key: vars(p) for key, p in seen.items()}))
    sys.exit(code)


if __name__ == "__main__":
    main()
