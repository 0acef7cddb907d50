"""A section with one rank on each of N nodes of the fleet (``--fleet ADDR --nodes N``): the venue
the plan's section gives through its ``across_nodes`` part of the contract (``sections.py``).

The runner drives that venue like any other run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from torchcanary import sections
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan

if TYPE_CHECKING:
    from torchcanary.fleet.executor import Executor
    from torchcanary.runner import Venue


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


def across_nodes(
    plan: RunPlan, executor: Executor, address: str, nodes: int, shared_dir: Path | None
) -> Venue:
    """The venue that spreads ``plan``'s one section over ``nodes`` nodes."""
    registry = sections.registered()
    if len(plan.sections) == 1:
        venue = sections.across_nodes(registry[plan.sections[0]])
        if venue is not None:
            return venue(executor, address, nodes, shared_dir=shared_dir)
    able = [name for name, section in registry.items() if sections.across_nodes(section)]
    raise ConfigError(f"--nodes runs one of {', '.join(able)} alone, not {plan.sections}")
