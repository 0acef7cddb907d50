"""A section's work across nodes (``--fleet ADDR --nodes N``): what it does, what it is handed.

A section's ``across_nodes`` part (``contract.py``) returns a :class:`NodesWork`. The fleet's
venue (``fleet/across_nodes.py``) starts the run, stores the work's planned units, has it
carried out and decides with the policy, as for every run; so the section only places its
ranks and measures, and never imports the runner, the policy or the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.section_types import PlannedUnit
from torchcanary.store.base import ResultStore

MIXED_PREFIX = "mixed:"


@dataclass(frozen=True)
class Placement:
    """Where the work's ranks landed, when its results are filed under that place: the
    store's node key (``a+b``) and the one profile (or ``mixed:A,B``)."""

    node: str
    profile: str


@dataclass(frozen=True)
class NodesRun:
    """What the work is handed to carry out: ``results`` is the run's store scoped to the
    work's placement (the run's own where it has none); ``store`` is the run's own, for
    what belongs to the run as a whole (where the ranks were placed)."""

    plan: RunPlan
    run_id: str
    results: ResultStore
    store: ResultStore
    output_dir: Path
    progress: Progress


class NodesWork(Protocol):
    """One section's work across nodes, asked in this order: ``place`` (before the run is
    made: a refusal leaves no run behind), ``planned_units``, ``carry_out``; ``release``
    when the run could not be made after ``place`` held nodes."""

    @property
    def label(self) -> str:
        """What runs where, for the run's first line (``collectives across 2 nodes``)."""
        ...

    def place(self, plan: RunPlan, progress: Progress) -> Placement | None:
        """Hold the nodes the work runs on; its placement if results are filed under it."""
        ...

    def planned_units(self, plan: RunPlan) -> dict[str, list[PlannedUnit]]:
        """Each section's units as this work will run them (after ``place``)."""
        ...

    def carry_out(self, run: NodesRun) -> None:
        """Every unit, stored as it finishes; the nodes let go at the end."""
        ...

    def release(self) -> None:
        """Let go of what ``place`` held."""
        ...


def placed_profile(keys: Sequence[str], mixed: bool) -> str:
    """The one profile the rank hosts were placed on; with ``mixed``, ``mixed:A,B`` for
    several; else ConfigError (exit 2): one result must come from one kind of hardware."""
    distinct = sorted(set(keys))
    if len(distinct) == 1:
        return distinct[0]
    if mixed:
        return MIXED_PREFIX + ",".join(distinct)
    raise ConfigError(
        f"--nodes {len(keys)} placed ranks on nodes of {len(distinct)} profiles "
        f"({', '.join(distinct)}); add --fleet-mixed to run across them anyway, filed under "
        f"{MIXED_PREFIX}{','.join(distinct)}"
    )
