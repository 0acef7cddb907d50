"""run_ranks gives real gloo groups and never hangs on a stuck rank."""

from __future__ import annotations

import os

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
    )
    worker = WorkerProcess(baseline_env.python, import_root, env_vars={"PYTHONPATH": str(tmp_path)})
    try:
        ok = worker.call(
            "torchcanary.worker.multirank:run_ranks",
            {
                "target": "rank_targets:all_reduce",
                "world_size": 2,
                "timeout_s": 120,
                "start": start,
            },
            180,
        )
        assert ok.ok, ok.error + ok.traceback
        assert ok.value == [3.0, 3.0]
        stuck = worker.call(
            "torchcanary.worker.multirank:run_ranks",
            {
                "target": "rank_targets:only_rank0_reduces",
                "world_size": 2,
                # Waited out whole: long enough for a spawned rank to import torch and
                # block in its collective, no longer.
                "timeout_s": 8,
                "start": start,
            },
            120,
        )
        assert stuck.status == "error" and "RanksFailed" in stuck.error
        assert "timed out after 8 s" in stuck.error
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
