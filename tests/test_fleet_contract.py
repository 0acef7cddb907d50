"""What every fleet engine owes the driver (``fleet/executor.py``), checked on each engine.

One test, run on a real one-node Ray cluster and the session's real Slurm cluster
(tests/slurm_cluster.py, shared with test_fleet_slurm.py): a unit's pieces come back PARTIAL
before its one end, a unit whose work raises ends FAILED with the error in one line (never
lost, never missing), and a healthy unit beside it ends OK, each tagged with the node it ran
on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fleet_helpers import unit_ends
from local_cluster import SMOKE


@pytest.fixture(scope="module")
def slurm_executor(slurm_cluster, tmp_path_factory) -> Iterator[Any]:
    """The Slurm executor on the session's Slurm cluster (conftest.py)."""
    from torchcanary.fleet.connect import connect_fleet

    fleet_dir = tmp_path_factory.mktemp("contract-fleet")
    with connect_fleet("slurm", fleet_dir=fleet_dir) as executor:
        yield executor


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[Any]:
    """The Ray executor on a one-node cluster of this module's own: the session's cluster
    would otherwise start here, before the drill modules that start and stop their own."""
    from fleet_helpers import require_ray
    from local_cluster import start_local_cluster, stop_local_cluster
    from torchcanary.fleet.connect import connect_fleet

    require_ray()
    cluster = start_local_cluster(["contract-box"])
    try:
        with connect_fleet(cluster.address, timeout_s=60) as executor:
            yield executor
    finally:
        assert stop_local_cluster(cluster) == [], "Ray processes left behind"


@pytest.fixture(
    params=[
        pytest.param("ray", marks=pytest.mark.ray),
        pytest.param("slurm", marks=pytest.mark.slurm),
    ]
)
def executor(request: pytest.FixtureRequest) -> Any:
    """Each engine's executor, on this module's Ray cluster or the session's Slurm one."""
    return request.getfixturevalue(f"{request.param}_executor")


def test_pieces_come_before_the_end_and_a_raising_unit_ends_failed_beside_a_good_one(
    executor: Any,
) -> None:
    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.unit import UnitStatus, WorkUnit

    node = executor.discover()[0]
    assignments = [
        Assignment(node, WorkUnit("good", SMOKE, {"pieces": 2})),
        Assignment(node, WorkUnit("broken", SMOKE, {"pieces": 1, "fail": "boom"})),
    ]
    ends = {end.unit_id: (end, pieces) for end, pieces in unit_ends(executor, assignments)}
    assert set(ends) == {"good", "broken"}  # each unit ends exactly once
    good, good_pieces = ends["good"]
    assert good.status is UnitStatus.OK and good.error is None
    assert [piece["piece"] for piece in good_pieces] == [0, 1]
    broken, broken_pieces = ends["broken"]
    assert broken.status is UnitStatus.FAILED and broken.error == "RuntimeError: boom"
    assert [piece["piece"] for piece in broken_pieces] == [0]  # sent before it raised
    assert {end.node_id for end, _ in ends.values()} == {node.node_id}
    assert broken.noticed_s is None  # only a lost unit has a time to notice
