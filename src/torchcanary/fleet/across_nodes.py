"""A section with one rank on each of N Ray nodes (``drill`` or ``bench`` with
``--fleet ADDR --nodes N``): the venue the plan's section asks for.

The section of the plan selects the venue (the drills' ranks, or the bench's collectives);
the runner drives either like any other run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from torchcanary.errors import ConfigError
from torchcanary.fleet.drill_run import NodeDrillRun
from torchcanary.fleet.node_bench import NodeBenchRun
from torchcanary.plan import RunPlan

if TYPE_CHECKING:
    from torchcanary.fleet.ray_executor import RayExecutor
    from torchcanary.runner import Venue

NOUNS = {"bench": "a bench", "drill": "a drill"}  # the sections that run across nodes


def check_across_nodes(address: str | None, nodes: int, section: str) -> str:
    """The fleet's address, once ``--nodes`` is known to be usable; ConfigError (exit 2)."""
    if not address:
        raise ConfigError(
            f"--nodes {nodes} places ranks on Ray nodes: add --fleet ADDRESS "
            "(ray://HEAD:10001, HOST:PORT or auto)"
        )
    if nodes < 2:
        raise ConfigError(f"--nodes {nodes}: {NOUNS[section]} across nodes needs at least 2")
    return address


def across_nodes(
    plan: RunPlan, executor: RayExecutor, address: str, nodes: int, shared_dir: Path | None
) -> Venue:
    """The venue that spreads ``plan``'s one section over ``nodes`` nodes."""
    if plan.sections == ("bench",):
        return NodeBenchRun(executor, address, nodes)
    if plan.sections == ("drill",):
        return NodeDrillRun(executor, address, nodes, shared_dir=shared_dir)
    raise ConfigError(f"--nodes runs one of {', '.join(NOUNS)} alone, not {plan.sections}")
