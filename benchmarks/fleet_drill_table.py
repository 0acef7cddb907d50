"""The two-node drill table next to the single-node one: detect, resume, steps lost.

    PYTHONPATH=src python benchmarks/fleet_drill_table.py [--roles candidate]
        [--faults kill:restart-unshared,kill:timeout,hang:timeout,node-kill:timeout]

Runs the same drills (same job, seeds, steps and fault step) twice per environment: on this
machine as ``torchcanary drill`` does, and with one rank on each of two nodes of a real Ray
cluster started here on 127.0.0.1 (a head that holds no work and one pair of one-CPU nodes
per environment, since node-kill kills one), as ``torchcanary drill --fleet ADDR --nodes 2``
does. Prints one Markdown row per drill and environment. All nodes share this machine's
clock, loopback and disk, so the two-node figures show the cost of the fleet's machinery
(torchrun per node, rendezvous over TCP, Ray), not of a real network.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from torchcanary.context import RunContext
from torchcanary.drills import section
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.fleet.drill_run import execute_node_drills
from torchcanary.fleet.local_cluster import start_local_cluster, stop_local_cluster
from torchcanary.fleet.ray_executor import connect
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.view import RunView
from torchcanary.runner import import_root
from torchcanary.store.sqlite import Store

FAULTS = "kill:restart-unshared,kill:timeout,hang:timeout,node-kill:timeout"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--roles", default="baseline,candidate")
    parser.add_argument("--faults", default=FAULTS)
    args = parser.parse_args()
    roles = tuple(args.roles.split(","))
    plan = RunPlan(
        baseline=args.baseline,
        candidate=args.candidate,
        sections=("drill",),
        settings={"drill": {"faults": args.faults.split(",")}},
    )
    with tempfile.TemporaryDirectory(prefix="fleet-drill-table-") as scratch:
        one = _single_node(plan, roles, Path(scratch))
        two = _two_nodes(plan, roles, Path(scratch))
    print("| drill | env | one machine | two nodes |")
    print("|---|---|---|---|")
    for key in args.faults.split(","):
        for role in roles:
            here, there = _cell(one.get((key, role))), _cell(two.get((key, role)))
            print(f"| {key} | {role} | {here} | {there} |")
    print("\n(d: detect, r: resume after the fault, lost: steps redone)")
    return 0


def _single_node(plan: RunPlan, roles: tuple[str, ...], scratch: Path) -> dict[Any, Any]:
    environments = {
        role: ensure_environment(role, parse_env_spec(getattr(plan, role))) for role in roles
    }
    with Store(scratch / "one.db") as store:
        run_id = store.create_run(plan.to_json())
        ctx = RunContext(
            run_id=run_id,
            store=store,
            plan=plan,
            environments=environments,
            import_root=import_root(plan, scratch),
            work_dir=scratch,
            progress=Progress(),
        )
        section.run(ctx)
        return {(r.key, r.env_role): r for r in RunView.load(store, run_id).sections["drill"]}


def _two_nodes(plan: RunPlan, roles: tuple[str, ...], scratch: Path) -> dict[Any, Any]:
    names = ["head"] + [f"{role}-{i}" for role in roles for i in (0, 1)]
    cluster = start_local_cluster(names, head_cpus=0)
    try:
        with Store(scratch / "two.db") as store, connect(cluster.address, timeout_s=60) as fleet:
            outcome = execute_node_drills(
                plan, store, scratch / "out", Progress(), fleet, cluster.address, 2, roles
            )
            view = RunView.load(store, outcome.run_id)
            return {(r.key, r.env_role): r for r in view.sections["drill"]}
    finally:
        left = stop_local_cluster(cluster)
        if left:
            print(f"Ray processes left behind: {left}")


def _cell(result: Any) -> str:
    if result is None:
        return "–"
    payload = result.payload

    def seconds(key: str) -> str:
        value = payload.get(key)
        return f"{value:.1f}s" if isinstance(value, (int, float)) else "–"

    lost = payload.get("steps_lost")
    return (
        f"{result.verdict} d {seconds('detect_s')} r {seconds('resume_s')} "
        f"lost {'–' if lost is None else lost}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
