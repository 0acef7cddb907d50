"""A section with one rank on each of N nodes of the fleet (``--fleet ADDR --nodes N``): the
venue made of the work the plan's section gives through its ``across_nodes`` part of the
contract (``contract.py``, ``nodes_work.py``).

The runner drives that venue like any other run: the run is made, its units declared and
its decision taken here, so the section only places ranks and measures. Each rank host
holds its node's GPUs (``gpus_across``); ranks placed on nodes of different profiles are
refused, or filed under ``mixed:A,B`` with ``--fleet-mixed`` (``nodes_work.placed_profile``),
never under a joined key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary import sections
from torchcanary.errors import ConfigError
from torchcanary.hardware_profile import FleetNode
from torchcanary.nodes_work import NodesRun, NodesWork, Placement
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide
from torchcanary.report.view import load_run_view
from torchcanary.runner import RunInputs, start_run
from torchcanary.section_types import PlannedUnit
from torchcanary.store.base import ResultStore

if TYPE_CHECKING:
    from torchcanary.fleet.executor import Executor


def check_across_nodes(address: str | None, nodes: int, section: str) -> str:
    """The fleet's address, once ``--nodes`` is known to be usable; ConfigError (exit 2)."""
    if not address:
        raise ConfigError(
            f"--nodes {nodes} places ranks on the fleet's nodes: add --fleet ADDRESS "
            "(ray://HEAD:10001, HOST:PORT, auto or slurm[:PARTITION])"
        )
    if nodes < 2:
        raise ConfigError(f"--nodes {nodes}: a {section} across nodes needs at least 2")
    return address


def gpus_across(
    live: Sequence[FleetNode], nodes: int, asked: int | None, mixed: bool = False
) -> int:
    """The GPUs each of ``nodes`` rank hosts holds: ``asked`` (``--fleet-gpus``), else the
    most that ``nodes`` live nodes all have (0 on a fleet without GPUs). A fleet with GPU
    nodes, but fewer than ``nodes``, is a ConfigError (the ranks would quietly run on none),
    unless ``mixed`` (``--fleet-mixed``) asked for nodes of any hardware: then they run on
    none, filed under the mixed profile that says so."""
    if asked is not None:
        if asked < 1:
            raise ConfigError(f"--fleet-gpus {asked}: give a whole number of GPUs, at least 1")
        return asked
    counts = sorted((node.gpus for node in live), reverse=True)
    with_gpus = sum(1 for count in counts if count > 0)
    if 0 < with_gpus < nodes and not mixed:
        raise ConfigError(
            f"--nodes {nodes}: only {with_gpus} live node(s) of the fleet have GPUs, so the "
            f"ranks would run without any; ask --nodes {with_gpus} or fewer, bring up more "
            "GPU nodes, or add --fleet-mixed to run the ranks without GPUs"
        )
    return counts[nodes - 1] if len(counts) >= nodes else 0


def across_nodes(
    plan: RunPlan,
    executor: Executor,
    address: str,
    nodes: int,
    shared_dir: Path | None,
    gpus: int = 0,
    mixed: bool = False,
) -> NodesVenue:
    """The venue that spreads ``plan``'s one section over ``nodes`` nodes, each rank host
    holding ``gpus`` GPUs; ``mixed`` lets the nodes differ in profile."""
    registry = sections.registered()
    if len(plan.sections) == 1:
        work = registry[plan.sections[0]].across_nodes
        if work is not None:
            return NodesVenue(
                work(executor, address, nodes, shared_dir=shared_dir, gpus=gpus, mixed=mixed)
            )
    able = [name for name, section in registry.items() if section.across_nodes]
    raise ConfigError(f"--nodes runs one of {', '.join(able)} alone, not {plan.sections}")


@dataclass
class NodesVenue:
    """A section's work across nodes (``nodes_work.NodesWork``) as a run's venue: the run
    is made once the work holds its nodes, and decided by the policy over the plan's
    sections with every planned unit accounted for, as on this machine; results filed
    under a placement are decided there, their reasons tagged with its profile."""

    work: NodesWork
    _placement: Placement | None = None

    def open(self, run: RunInputs, resume_run_id: str | None) -> str:
        self._placement = self.work.place(run.plan, run.progress)
        try:
            run_id = start_run(run.store, run.plan, resume_run_id)
        except BaseException:
            self.work.release()
            raise
        run.progress.note(f"run {run_id} -> {run.store.location} ({self.work.label})")
        return run_id

    def planned_units(self, run: RunInputs) -> dict[str, list[PlannedUnit]]:
        return self.work.planned_units(run.plan)

    def carry_out(self, run: RunInputs, run_id: str) -> dict[str, str]:
        results = self._results(run.store)
        self.work.carry_out(
            NodesRun(run.plan, run_id, results, run.store, run.output_dir, run.progress)
        )
        return {}

    def decide(
        self, run: RunInputs, run_id: str, failures: dict[str, str]
    ) -> tuple[Decision, dict[str, Any]]:
        view = load_run_view(self._results(run.store), run_id)
        planned = self.planned_units(run)
        own = decide(view, run.plan.policy, run.plan.sections, failures, planned=planned)
        if self._placement is None:
            return own, {}
        tag = f"[{self._placement.profile}] "
        return Decision(
            own.go,
            tuple(tag + reason for reason in own.reasons),
            tuple(tag + warning for warning in own.warnings),
            own.not_checked,
        ), {}

    def close(self, run: RunInputs, run_id: str, failures: dict[str, str]) -> None:
        pass

    def _results(self, store: ResultStore) -> ResultStore:
        where = self._placement
        return store.scoped(where.node, where.profile) if where else store
