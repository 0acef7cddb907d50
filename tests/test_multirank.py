"""run_ranks gives real gloo groups and never hangs on a stuck rank."""

from __future__ import annotations

import os
from typing import Any

import pytest

from torchcanary.envs.worker_process import WorkerProcess

pytestmark = pytest.mark.torch_envs


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_two_gloo_ranks_all_reduce_and_a_stuck_group_times_out(
    start, baseline_env, import_root, monkeypatch, tmp_path
):
    (tmp_path / "rank_targets.py").write_text(
        "def all_reduce(rank, world_size):\n"
        "    import torch, torch.distributed as dist\n"
        "    t = torch.tensor([float(rank + 1)])\n"
        "    dist.all_reduce(t)\n"
        "    return t.item()\n"
        "def only_rank0_reduces(rank, world_size):\n"
        "    import torch, torch.distributed as dist\n"
        "    if rank == 0:\n"
        "        dist.all_reduce(torch.ones(1))\n"
        "    else:\n"
        "        import time; time.sleep(600)\n"
        "def answers_then_aborts_at_exit(rank, world_size):\n"
        "    import atexit, os\n"
        "    atexit.register(os.abort)\n"
        "    return rank\n"
    )
    worker = WorkerProcess(baseline_env.python, import_root, env_vars={"PYTHONPATH": str(tmp_path)})

    def ranks(target: str, timeout_s: float = 120, **more: str) -> Any:
        spec = {"target": f"rank_targets:{target}", "world_size": 2, "start": start, **more}
        return worker.call(
            "torchcanary.worker.multirank:run_ranks", {**spec, "timeout_s": timeout_s}, 180
        )

    try:
        ok = ranks("all_reduce")
        assert ok.ok, ok.error + ok.traceback
        assert ok.value == [3.0, 3.0]
        # Waited out whole: long enough for a spawned rank to import torch and block in its
        # collective, no longer.
        stuck = ranks("only_rank0_reduces", timeout_s=8)
        assert stuck.status == "error" and "RanksFailed" in stuck.error
        assert "timed out after 8 s" in stuck.error
        # A rank that has answered and left its group is done: its interpreter's teardown
        # (where a backend's threads can abort it) is not part of the answer.
        answered = ranks("answers_then_aborts_at_exit")
        assert answered.ok, answered.error + answered.traceback
        assert answered.value == [0, 1]
        # This CPU build has no NCCL: no rank joins, and the failure says the group never
        # formed, so a probe reports a broken harness rather than a verdict on its claim.
        unformed = ranks("all_reduce", backend="nccl")
        assert unformed.status == "error"
        assert "failed before the group formed" in unformed.error
    finally:
        worker.close()


def test_forked_ranks_of_a_pinned_worker_take_the_cpus_they_are_given(
    baseline_env, import_root, tmp_path
):
    """The bench pins its worker to one core; its collective's ranks must not share it."""
    machine = sorted(os.sched_getaffinity(0))
    (tmp_path / "rank_targets.py").write_text(
        "import os\n"
        "def affinity(rank, world_size):\n"
        "    return [os.getppid(), sorted(os.sched_getaffinity(0))]\n"
    )
    worker = WorkerProcess(baseline_env.python, import_root, env_vars={"PYTHONPATH": str(tmp_path)})
    try:
        pinned = worker.call("torchcanary.worker.bench.timing:configure", {"threads": 1}, 180)
        assert pinned.ok, pinned.error
        assert pinned.value["affinity"] == machine[-1:]
        ranks = worker.call(
            "torchcanary.worker.multirank:run_ranks",
            {
                "target": "rank_targets:affinity",
                "world_size": 2,
                "timeout_s": 120,
                "start": "fork",
                "cpus": machine,
            },
            180,
        )
        assert ranks.ok, ranks.error + ranks.traceback
        # Forked from the worker itself (not a fresh interpreter), each on every CPU given.
        assert ranks.value == [[pinned.value["pid"], machine]] * 2
    finally:
        worker.close()
