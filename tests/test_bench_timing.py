"""The timed worker's CPU placement (samples on the pinned core, untimed warm-ups spread)
and its garbage collection (what configure loaded frozen, a benchmark's garbage collected)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from torchcanary.envs.worker_process import WorkerProcess

pytestmark = pytest.mark.torch_envs

PROBE = """
import os
from torchcanary.worker.bench import timing

def _all_threads():
    tasks = os.listdir("/proc/self/task")
    return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in tasks})

def warm_up_placement(spec, spread):
    seen = []
    original = timing._warm_up
    def recording(*args, **kwargs):
        seen.append(sorted(os.sched_getaffinity(0)))
        return original(*args, **kwargs)
    timing._warm_up = recording
    try:
        first = timing.prepare("b", spec, min_sample_s=0.001)
        timing.release("b")
        timing.prepare("b", spec, number=first["number"], min_sample_s=0.001, spread=spread)
        timing.release("b")
    finally:
        timing._warm_up = original
    return {"during": seen, "after": _all_threads()}

def release_collects(spec):
    import gc, weakref

    class Cycle:
        pass

    timing.prepare("b", spec, min_sample_s=0.001)
    made = Cycle()
    made.me = made  # garbage only a collection finds, as a benchmark's cycles are
    alive = weakref.ref(made)
    timing._PREPARED["b"].workload.keepalive += (made,)
    del made
    frozen = gc.get_freeze_count()
    timing.release("b")
    return {"frozen": frozen, "cycle_collected": alive() is None}
"""

GEMM = {
    "kind": "gemm",
    "m": 64,
    "n": 64,
    "k": 64,
    "dtype": "float32",
    "device": "cpu",
    "id": "gemm/64",
}


@contextmanager
def configured_worker(
    python: str, import_root: Path, tmp_path: Path
) -> Iterator[tuple[WorkerProcess, dict[str, Any]]]:
    """A bench worker in ``python`` that can import the probe, configured on one thread,
    with what ``configure`` answered."""
    (tmp_path / "placement_probe.py").write_text(PROBE)
    worker = WorkerProcess(python, import_root, env_vars={"PYTHONPATH": str(tmp_path)})
    try:
        configured = worker.call("torchcanary.worker.bench.timing:configure", {"threads": 1}, 180)
        assert configured.ok, configured.error
        yield worker, configured.value
    finally:
        worker.close()


def test_warm_ups_of_later_groups_spread_and_samples_stay_pinned(
    baseline_env, import_root, tmp_path
):
    machine = sorted(os.sched_getaffinity(0))
    if len(machine) < 2:
        pytest.skip("not checked: one CPU, nothing to spread over")
    with configured_worker(baseline_env.python, import_root, tmp_path) as (worker, configured):
        assert configured["affinity"] == machine[-1:]
        for spread, during_second in ((False, machine[-1:]), (True, machine)):
            placed = worker.call(
                "placement_probe:warm_up_placement", {"spec": GEMM, "spread": spread}, 180
            )
            assert placed.ok, placed.error + placed.traceback
            # The first prepare calibrates, which times: pinned whatever was asked.
            assert placed.value["during"] == [machine[-1:], during_second]
            assert placed.value["after"] == [machine[-1:]]  # all threads back on the core


def test_configure_freezes_what_the_worker_loaded_and_release_still_collects(
    baseline_env, import_root, tmp_path
):
    with configured_worker(baseline_env.python, import_root, tmp_path) as (worker, _):
        released = worker.call("placement_probe:release_collects", {"spec": GEMM}, 180)
        assert released.ok, released.error + released.traceback
        # torch's modules: far more objects than any benchmark makes, none of them collected
        # again after configure.
        assert released.value["frozen"] > 100_000
        assert released.value["cycle_collected"] is True
