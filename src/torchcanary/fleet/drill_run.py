"""``torchcanary drill --fleet ADDR --nodes N``: the drill section with its ranks on N nodes.

The run is made and reported like a drill run on one machine (same rows, same verdicts,
same policy and reports), but each drill's ranks sit on distinct Ray nodes
(``fleet/node_drill.py``). Each row's payload names the nodes it ran on, and the run keeps
the fleet's address and node count (``fleet.json``) so the report says where it ran.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchcanary.context import ROLES
from torchcanary.drill.catalog import DEFAULT_DRILLS, DrillSpec
from torchcanary.drill.drill import DrillOutcome
from torchcanary.drill.result import drill_record
from torchcanary.drill.section import SECTION, drill_specs, parse_settings
from torchcanary.drill.verdict import DrillVerdict
from torchcanary.fleet.node_drill import DEFAULT_NODE_DRILLS, NodeDrills
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide
from torchcanary.progress import Progress
from torchcanary.report.render import write_outputs
from torchcanary.report.view import load_run_view
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SectionResult

if TYPE_CHECKING:
    from torchcanary.fleet.ray_executor import RayExecutor

NODE_DRILL_ARTIFACT = "node_drill.json"


@dataclass(frozen=True)
class NodeRunOutcome:
    """What a run across nodes (drills, or the bench's collectives) left: its stored run."""

    run_id: str
    decision: Decision
    outputs: dict[str, Path]


def execute_node_drills(
    plan: RunPlan,
    store: ResultStore,
    output_dir: Path,
    progress: Progress,
    executor: RayExecutor,
    address: str,
    nodes: int,
    roles: tuple[str, ...] = ROLES,
    shared_dir: Path | None = None,
) -> NodeRunOutcome:
    """Every configured drill, in each of ``roles``' environments, on ``nodes`` nodes.

    Each environment gets its own placement group: a drill that kills a node leaves the
    next environment to the nodes still alive. Checkpoints go under ``shared_dir``, which
    every node must see (default: the output folder, which a cluster on one machine shares).
    """
    settings = parse_settings(plan.section_settings(SECTION))
    if settings["faults"] == list(DEFAULT_DRILLS):  # the defaults of a drill on one machine
        settings["faults"] = list(DEFAULT_NODE_DRILLS)
    specs = in_node_order(drill_specs(settings))
    run_id = store.create_run(plan.to_json())
    progress.note(f"run {run_id} -> {store.location} (drills across {nodes} nodes)")
    placed: dict[str, dict[str, object]] = {}
    try:
        for role in roles:
            shared = shared_dir or output_dir / "work" / run_id
            drills = NodeDrills(executor, plan.to_json(), role, nodes, shared.resolve())
            # The token tags every process of the drill on every node: how to find leftovers.
            placed[role] = {"token": drills.token, "nodes": drills.where()}
            try:
                with progress.task(f"{role} drills on {nodes} nodes", total=len(specs)) as task:
                    for spec in specs:
                        outcome = _run_one(drills, spec)
                        store.save_section_result(
                            run_id,
                            SectionResult.of(
                                SECTION,
                                drill_record(spec.key, role, outcome.verdict, outcome.payload),
                            ),
                        )
                        task.advance(f"{role} {spec.key}: {outcome.verdict.value}")
            finally:
                drills.close()
    except BaseException:
        store.set_run_status(run_id, "interrupted")
        raise
    store.save_artifact(
        run_id,
        NODE_DRILL_ARTIFACT,
        "application/json",
        json.dumps({"address": address, "nodes": nodes, "placed": placed}).encode(),
    )
    view = load_run_view(store, run_id)
    decision = decide(view, plan.policy, plan.sections, {})
    store.finish_run(run_id, decision.label, decision.to_json() | {"section_failures": {}})
    outputs = write_outputs(load_run_view(store, run_id), output_dir)
    return NodeRunOutcome(run_id, decision, outputs)


def in_node_order(specs: list[DrillSpec]) -> list[DrillSpec]:
    """The drills in the order given, except that node kills go last.

    A node kill takes its node for good, so any drill after it in the same environment
    would run one node short, or not at all.
    """
    return sorted(specs, key=lambda spec: spec.fault == "node-kill")


def _run_one(drills: NodeDrills, spec: DrillSpec) -> DrillOutcome:
    """A drill whose harness raises is recorded as an error; the others go on."""
    try:
        return drills.run(spec)
    except Exception as exc:
        return DrillOutcome(
            DrillVerdict.ERROR,
            {
                "reason": f"drill harness raised {type(exc).__name__}: {exc}"[:600],
                "traceback": traceback.format_exc()[-3000:],
            },
        )
