"""Where ``import torch`` spends its time, measured in fresh interpreters (stdlib only here;
torch is imported by the children, after their clocks start).

Three kinds of child, each a fresh ``python`` so nothing is cached in the process:

- ``plain``: seconds for ``import torch`` alone, as the bench measures it;
- ``preload``: each shared library ``import torch`` loads (the list is handed in, in the
  order given) opened one by one with ``ctypes`` and timed, then ``import torch`` timed:
  the import split into each library's loading and the rest (Python modules, init);
- ``importtime``: ``python -X importtime``: each module's own microseconds, and the shared
  libraries mapped after the import (``/proc/self/maps``) with their sizes.

Each phase of ``plain`` and ``preload`` is timed twice: in wall seconds, and in the
process's CPU seconds (all its threads), which the other work of a shared machine moves
far less (``explain/startup.py`` says why the split uses the latter).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from typing import Any

from torchcanary.worker.ending import end_now

_MAIN = "torchcanary.worker.explain.startup"


def _mapped_libraries() -> list[str]:
    """Shared objects mapped into this process, in first-mapped order (Linux only)."""
    seen: dict[str, None] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if path.startswith("/") and ".so" in os.path.basename(path):
                    seen.setdefault(path, None)
    except OSError:
        return []
    return list(seen)


def _child(mode: str, options: dict[str, Any]) -> dict[str, Any]:
    before = set(_mapped_libraries())
    libraries: dict[str, float] = {}
    libraries_cpu: dict[str, float] = {}
    failed: dict[str, str] = {}
    if mode == "preload":
        pending = list(options["libraries"])
        for _ in range(3):  # one that needs a library later in the list is tried again after
            failed = {}
            for path in pending:
                start, cpu = time.perf_counter(), time.process_time()
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                except OSError as exc:
                    failed[path] = str(exc)[:200]
                libraries[path] = libraries.get(path, 0.0) + time.perf_counter() - start
                libraries_cpu[path] = libraries_cpu.get(path, 0.0) + time.process_time() - cpu
            pending = list(failed)
    start, cpu = time.perf_counter(), time.process_time()
    import torch  # noqa: F401

    answer: dict[str, Any] = {
        "import_s": time.perf_counter() - start,
        "import_cpu_s": time.process_time() - cpu,
    }
    if mode == "preload":
        answer |= {"libraries_s": libraries, "libraries_cpu_s": libraries_cpu, "failed": failed}
    if mode == "importtime":
        loaded = [path for path in _mapped_libraries() if path not in before]
        answer["libraries"] = {path: os.path.getsize(path) for path in loaded}
    return answer


def _module_times(stderr: str) -> dict[str, float]:
    """``-X importtime`` lines (``import time: self | cumulative | name``) as module -> self s."""
    times: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        columns = line[len("import time:") :].split("|")
        if len(columns) != 3 or not columns[0].strip().isdigit():
            continue  # the header line
        name = columns[2].strip()
        if not name.startswith("torchcanary"):
            times[name] = times.get(name, 0.0) + int(columns[0]) / 1e6
    return times


def sample(
    mode: str, libraries: list[str] | None = None, timeout_s: float = 120.0
) -> dict[str, Any]:
    """One fresh-interpreter sample of ``mode`` (``plain``, ``preload``, ``importtime``)."""
    flags = ["-X", "importtime"] if mode == "importtime" else []
    options = json.dumps({"libraries": libraries or []})
    try:
        done = subprocess.run(
            [sys.executable, *flags, "-m", _MAIN, mode, options],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{mode} sample took over {timeout_s:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
        return {"error": f"{mode} child exited {done.returncode}: {tail}"}
    answer = dict(json.loads(lines[-1]))
    if mode == "importtime":
        answer["modules_s"] = _module_times(done.stderr)
    return answer


def main() -> None:
    sys.stdout.write(json.dumps(_child(sys.argv[1], json.loads(sys.argv[2]))) + "\n")
    end_now()  # the sample is out; the caller waits for this process's end


if __name__ == "__main__":
    main()
