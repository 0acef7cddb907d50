"""A section with one rank on each of N nodes of the fleet (``--fleet ADDR --nodes N``): the venue
the plan's section gives through its ``across_nodes`` part of the contract (``contract.py``).

The runner drives that venue like any other run. Each rank host holds its node's GPUs
(``gpus_across``); ranks placed on nodes of different profiles are refused, or filed under
``mixed:A,B`` with ``--fleet-mixed`` (``placed_profile``), never under a joined key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torchcanary import sections
from torchcanary.errors import ConfigError
from torchcanary.hardware_profile import FleetNode
from torchcanary.plan import RunPlan

MIXED_PREFIX = "mixed:"

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


def across_nodes(
    plan: RunPlan,
    executor: Executor,
    address: str,
    nodes: int,
    shared_dir: Path | None,
    gpus: int = 0,
    mixed: bool = False,
) -> Venue:
    """The venue that spreads ``plan``'s one section over ``nodes`` nodes, each rank host
    holding ``gpus`` GPUs; ``mixed`` lets the nodes differ in profile."""
    registry = sections.registered()
    if len(plan.sections) == 1:
        venue = registry[plan.sections[0]].across_nodes
        if venue is not None:
            return venue(executor, address, nodes, shared_dir=shared_dir, gpus=gpus, mixed=mixed)
    able = [name for name, section in registry.items() if section.across_nodes]
    raise ConfigError(f"--nodes runs one of {', '.join(able)} alone, not {plan.sections}")
