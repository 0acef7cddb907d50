"""A closed worker ends at once, without the interpreter's teardown, and takes what it
started with it (``worker/ending.py``, ``envs/worker_process.py``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from process_helpers import running
from torchcanary.envs.worker_process import WorkerProcess, import_root_for

LEAVER = '''
import atexit
import pathlib
import subprocess


def start(marker: str) -> int:
    """Register a teardown hook, start a child that outlives this call, return its pid."""
    atexit.register(pathlib.Path(marker).write_text, "teardown ran")
    return subprocess.Popen(["sleep", "60"]).pid
'''


def test_a_closed_worker_skips_its_teardown_and_takes_the_child_it_started(tmp_path: Path) -> None:
    root = import_root_for(("torchcanary",), tmp_path / "root")
    (root / "canary_leaver.py").write_text(LEAVER)
    marker = tmp_path / "marker"
    worker = WorkerProcess(sys.executable, root)
    try:
        started = worker.call("canary_leaver:start", {"marker": str(marker)}, 60)
        assert started.ok, started.error
        child = int(started.value)
        assert running(child)
    finally:
        worker.close()
    assert not worker.alive()
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child), "the worker's child outlived the worker"
    assert not marker.exists(), "the worker ran the interpreter's teardown"
