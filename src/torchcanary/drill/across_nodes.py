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
from torchcanary.policy import Decision, decide
from torchcanary.report.view import load_run_view
from torchcanary.runner import RunInputs, start_run
from torchcanary.section_types import PlannedUnit
from torchcanary.store.rows import SectionResult

if TYPE_CHECKING:
    from torchcanary.fleet.executor import Executor

NODE_DRILL_ARTIFACT = "node_drill.json"


def venue(
    executor: Executor,
    address: str,
    nodes: int,
    shared_dir: Path | None = None,
    gpus: int = 0,
    mixed: bool = False,
    **_: Any,
) -> NodeDrillRun:
    """The drill's ``across_nodes`` part of the section contract (``sections.py``);
    ``shared_dir`` is ``--shared-dir``, the checkpoints' folder every node sees."""
    return NodeDrillRun(executor, address, nodes, shared_dir=shared_dir, gpus=gpus, mixed=mixed)


@dataclass
class NodeDrillRun:
    """The venue of every configured drill, in each of ``roles``' environments, on ``nodes``
    nodes (``runner.execute`` drives it).

    Each environment gets its own placement group: a drill that kills a node leaves the
    next environment to the nodes still alive. Checkpoints go under ``shared_dir``, which
    every node must see (default: the output folder, which a cluster on one machine shares).
    """

    executor: Executor
    address: str
    nodes: int
    roles: tuple[str, ...] = ROLES
    shared_dir: Path | None = None
    gpus: int = 0  # each rank host's GPUs
    mixed: bool = False  # --fleet-mixed: nodes of several profiles, named mixed:A,B

    def open(self, run: RunInputs, resume_run_id: str | None) -> str:
        run_id = start_run(run.store, run.plan, resume_run_id)
        run.progress.note(
            f"run {run_id} -> {run.store.location} (drills across {self.nodes} nodes)"
        )
        return run_id

    def planned_units(self, run: RunInputs) -> dict[str, list[PlannedUnit]]:
        """Each drill across the nodes, one trial in each environment."""
        units = [PlannedUnit(s.key, role, 1) for s in _node_drills(run) for role in self.roles]
        return {SECTION: units}

    def carry_out(self, run: RunInputs, run_id: str) -> dict[str, str]:
        specs = _node_drills(run)
        placed: dict[str, dict[str, object]] = {}
        for role in self.roles:
            shared = self.shared_dir or run.output_dir / "work" / run_id
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
                        run.store.save_section_result(run_id, SectionResult.of(SECTION, record))
                        task.advance(f"{role} {spec.key}: {outcome.verdict.value}")
            finally:
                drills.close()
        where = {"address": self.address, "nodes": self.nodes, "placed": placed}
        run.store.save_artifact(
            run_id, NODE_DRILL_ARTIFACT, "application/json", json.dumps(where).encode()
        )
        return {}

    def decide(
        self, run: RunInputs, run_id: str, failures: dict[str, str]
    ) -> tuple[Decision, dict[str, Any]]:
        view = load_run_view(run.store, run_id)
        planned = self.planned_units(run)
        return decide(view, run.plan.policy, run.plan.sections, failures, planned=planned), {}

    def close(self, run: RunInputs, run_id: str, failures: dict[str, str]) -> None:
        pass


def _node_drills(run: RunInputs) -> list[DrillSpec]:
    """The drills a run across nodes does: its configured ones (the node drills where it
    kept a drill on one machine's defaults), node kills last."""
    settings = parse_settings(run.plan.section_settings(SECTION))
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
