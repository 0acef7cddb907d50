"""The Slurm fleet engine on a real Slurm cluster (tests/slurm_cluster.py): two nodes that
stand for two hardware profiles, a spare one started late, one slurmctld, all on this host.
One cluster serves the whole module; at its end no daemon or job process is left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_cluster import ClusterUnavailable, SlurmCluster, SlurmNodeSpec

pytestmark = pytest.mark.slurm

NODES = (
    SlurmNodeSpec("gpu-box", gpus=2),
    SlurmNodeSpec("plain-box"),
    SlurmNodeSpec("plain-box-2", profile="plain-box", start=False),
)


@pytest.fixture(scope="module")
def slurm_cluster(session_temp_dir: Path) -> Iterator[SlurmCluster]:
    try:
        cluster = SlurmCluster(NODES, parent=session_temp_dir / "servers")
    except ClusterUnavailable as exc:
        pytest.skip(f"not checked: no Slurm cluster could be started here: {exc}")
    try:
        yield cluster
    finally:
        assert cluster.destroy() == [], "Slurm daemons or job processes left behind"


def test_cluster_runs_a_job_step_on_both_nodes_and_gives_a_gpu_job_its_device_ids(
    slurm_cluster: SlurmCluster,
) -> None:
    names = slurm_cluster.run("srun", "-N2", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME")
    assert sorted(names.split()) == ["gpu-box", "plain-box"]
    seen = slurm_cluster.run(
        "srun", "-w", "gpu-box", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES"
    )
    assert seen.strip() == "0"
