"""What the fleet tests share with the cluster fixture in conftest.py.

Kept out of conftest.py because ``tests/fixtures/conftest.py`` also answers to the module
name ``conftest`` when the whole suite runs.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from env_specs import BASELINE_SPEC, CANDIDATE_SPEC
from real_parts import require_module
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.node_side import DEVICES_OP
from torchcanary.fleet.unit import UnitResult, UnitStatus

# The shared local Ray cluster: a head and two workers, each with its own
# `torchcanary.profile` label (and a custom resource) standing for a hardware profile.
FLEET_PROFILES = ("head-box", "alpha-box", "beta-box")


def unit_ends(
    executor: Executor, assignments: Sequence[Assignment]
) -> Iterator[tuple[UnitResult, list[Mapping[str, Any]]]]:
    """Each unit's end as it comes, with the outputs of the pieces it sent home before."""
    pieces: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for result in executor.dispatch_streaming(assignments):
        if result.status is UnitStatus.PARTIAL:
            if (result.output or {}).get("op") != DEVICES_OP:
                pieces[result.unit_id].append(result.output or {})
        else:
            yield result, pieces.pop(result.unit_id, [])


def without_devices(results: Sequence[UnitResult]) -> list[UnitResult]:
    """A unit's results without its first piece, what it was given (``node_kit/devices.py``)."""
    return [r for r in results if (r.output or {}).get("op") != DEVICES_OP]


def require_ray() -> None:
    """Skip as not checked where Ray is not installed (under CI a failure: real_parts.py)."""
    require_module("ray", "Ray", "pip install -e '.[dev]'")


@contextmanager
def candidate_node_drills(
    address: str, drills: dict[str, Any], nodes: int, tmp_path: Path
) -> Iterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """The candidate's drills on ``nodes`` nodes of the cluster at ``address``: the outcome,
    the drill rows by key, and the placement artifact, with the cluster still connected."""
    from env_specs import BASELINE_SPEC, CANDIDATE_SPEC
    from torchcanary.drill.across_nodes import NODE_DRILL_ARTIFACT, NodeDrillWork
    from torchcanary.fleet.across_nodes import NodesVenue
    from torchcanary.fleet.ray_connect import connect
    from torchcanary.plan import RunPlan
    from torchcanary.progress import Progress
    from torchcanary.report.view import load_run_view
    from torchcanary.runner import execute
    from torchcanary.store.sqlite import SqliteStore

    plan = RunPlan(
        baseline=BASELINE_SPEC,
        candidate=CANDIDATE_SPEC,
        sections=("drill",),
        settings={"drill": drills},
    )
    with SqliteStore(tmp_path / "canary.db") as store, connect(address, timeout_s=60) as fleet:
        # The test clusters label each node a profile of its own: a mix, named as such.
        venue = NodesVenue(NodeDrillWork(fleet, address, nodes, roles=("candidate",), mixed=True))
        outcome = execute(plan, store, tmp_path / "out", Progress(quiet=True), venue)
        rows = {r.key: r for r in load_run_view(store, outcome.run_id).sections["drill"]}
        placed = next(
            json.loads(data)
            for name, _, data in store.artifacts(outcome.run_id)
            if name == NODE_DRILL_ARTIFACT
        )
        yield outcome, rows, placed


def drill_processes_left(
    placed: dict[str, Any], nodes: range, role: str = "candidate"
) -> list[int]:
    """The ``role`` drill's processes still alive on ``nodes`` (should be none)."""
    from torchcanary.node_kit.rank_host import node_token
    from torchcanary.process_set import processes_with_token

    token = placed["placed"][role]["token"]
    return [pid for node in nodes for pid in processes_with_token(node_token(token, node))]


# A fleet run of the fleet probes (tests/fixtures/canary_fleet) and what it stored, read
# straight from its SQLite file while the run goes on: shared by the Ray and Slurm modules.
FLEET_PROBES = "fleet.feature,fleet.slow,fleet.needs-cuda"


def fleet_run_args(store: Path, output: Path, *more: str, probes: str = FLEET_PROBES) -> list[str]:
    """``torchcanary run`` of the fleet probes alone, into ``store`` and ``output``."""
    return [
        "run",
        "--only",
        "claims",
        "--probe-module",
        "canary_fleet",
        "--probes",
        probes,
        "--store",
        str(store),
        "--output",
        str(output),
        *more,
    ]


def stored_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """``sql``'s rows in ``db``; none while the run has not created the file or table yet."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        try:
            return connection.execute(sql).fetchall()
        except sqlite3.OperationalError:  # not created yet
            return []


def probe_rows(db: Path) -> dict[tuple[str, str, str], tuple[str, float, str]]:
    """(profile, role, probe) -> (node, started_at, verdict)."""
    rows = stored_rows(
        db, "SELECT profile, env_role, probe_id, node, started_at, verdict FROM probe_results"
    )
    return {
        (p, role, pid): (node, started, verdict) for p, role, pid, node, started, verdict in rows
    }


def collective_bench_plan(group_budget_s: float) -> Any:
    """The smallest bench across nodes: one all_reduce size, two groups, no A/A control."""
    from torchcanary.plan import RunPlan

    bench = {
        "families": ["collectives"],
        "collectives": {"ops": ["all_reduce"], "bytes": [2**16]},
        "groups": 2,
        "aa_control": False,
        "group_budget_s": group_budget_s,
    }
    return RunPlan(
        baseline=BASELINE_SPEC,
        candidate=CANDIDATE_SPEC,
        sections=("bench",),
        settings={"bench": bench},
    )
