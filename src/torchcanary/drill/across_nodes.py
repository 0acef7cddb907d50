"""``torchcanary drill --fleet ADDR --nodes N``: the drill section with its ranks on N nodes.

The run is made and reported like a drill run on one machine (same rows, same verdicts,
same policy and reports), but each drill's ranks sit on distinct Ray nodes
(``drill/node_drill.py``). Each row's payload names the nodes it ran on, and the run keeps
the fleet's address and node count (``fleet.json``) so the report says where it ran.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.context import ROLES
from torchcanary.drill.catalog import DEFAULT_DRILLS, DrillSpec
from torchcanary.drill.drill import DrillOutcome
from torchcanary.drill.node_drill import DEFAULT_NODE_DRILLS, NodeDrills
from torchcanary.drill.result import DrillVerdict, drill_record
from torchcanary.drill.section import SECTION
from torchcanary.drill.settings import parse_settings
from torchcanary.nodes_work import NodesRun
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.section_types import PlannedUnit
from torchcanary.store.rows import SectionResult

if TYPE_CHECKING:
    from torchcanary.node_kit.host_group import NodeFleet

NODE_DRILL_ARTIFACT = "node_drill.json"


def venue(
    executor: NodeFleet,
    address: str,
    nodes: int,
    shared_dir: Path | None = None,
    gpus: int = 0,
    mixed: bool = False,
    **_: Any,
) -> NodeDrillWork:
    """The drill's ``across_nodes`` part of the section contract (``contract.py``);
    ``shared_dir`` is ``--shared-dir``, the checkpoints' folder every node sees."""
    return NodeDrillWork(executor, address, nodes, shared_dir=shared_dir, gpus=gpus, mixed=mixed)


@dataclass
class NodeDrillWork:
    """Every configured drill, in each of ``roles``' environments, on ``nodes`` nodes (a
    ``nodes_work.NodesWork``: the fleet's venue makes and decides the run).

    Each environment gets its own placement group: a drill that kills a node leaves the
    next environment to the nodes still alive. Checkpoints go under ``shared_dir``, which
    every node must see (default: the output folder, which a cluster on one machine shares).
    """

    executor: NodeFleet
    address: str
    nodes: int
    roles: tuple[str, ...] = ROLES
    shared_dir: Path | None = None
    gpus: int = 0  # each rank host's GPUs
    mixed: bool = False  # --fleet-mixed: nodes of several profiles, named mixed:A,B

    @property
    def label(self) -> str:
        return f"drills across {self.nodes} nodes"

    def place(self, plan: RunPlan, progress: Progress) -> None:
        """Nothing held yet: each environment places its own ranks when its turn comes."""

    def release(self) -> None:
        pass

    def planned_units(self, plan: RunPlan) -> dict[str, list[PlannedUnit]]:
        """Each drill across the nodes, one trial in each environment."""
        units = [PlannedUnit(s.key, role, 1) for s in _node_drills(plan) for role in self.roles]
        return {SECTION: units}

    def carry_out(self, run: NodesRun) -> None:
        specs = _node_drills(run.plan)
        placed: dict[str, dict[str, object]] = {}
        for role in self.roles:
            shared = self.shared_dir or run.output_dir / "work" / run.run_id
            drills = NodeDrills(
                self.executor,
                run.plan.to_json(),
                role,
                self.nodes,
                shared.resolve(),
                gpus=self.gpus,
                mixed=self.mixed,
            )
            # The token tags every process of the drill on every node: how to find leftovers.
            placed[role] = {
                "token": drills.token,
                "profile": drills.profile,
                "gpus": self.gpus,
                "nodes": drills.where(),
            }
            try:
                title = f"{role} drills on {self.nodes} nodes"
                with run.progress.task(title, total=len(specs)) as task:
                    for spec in specs:
                        outcome = _run_one(drills, spec)
                        record = drill_record(spec.key, role, outcome.verdict, outcome.payload)
                        run.results.save_section_result(
                            run.run_id, SectionResult.of(SECTION, record)
                        )
                        task.advance(f"{role} {spec.key}: {outcome.verdict.value}")
            finally:
                drills.close()
        where = {"address": self.address, "nodes": self.nodes, "placed": placed}
        run.store.save_artifact(
            run.run_id, NODE_DRILL_ARTIFACT, "application/json", json.dumps(where).encode()
        )


def _node_drills(plan: RunPlan) -> list[DrillSpec]:
    """The drills a run across nodes does: its configured ones (the node drills where it
    kept a drill on one machine's defaults), node kills last."""
    settings = parse_settings(plan.section_settings(SECTION))
    if settings.faults == DEFAULT_DRILLS:  # the defaults of a drill on one machine
        settings = replace(settings, faults=DEFAULT_NODE_DRILLS)
    return in_node_order(settings.specs())


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
