"""Slurm's nodes as profiles: which nodes are alike, each group's facts read on one of them.

Nodes with the same features, GRES and CPUs are one group. Each group's facts are read by
a one-task ``srun`` placed by the group's features and asking for its GRES
(``slurm_placement.py``): Slurm runs it on whichever node of the group is free, and under
``ConstrainDevices=yes`` the step sees the group's GPUs, as a unit will. While every node
of a group is busy the step waits, saying so every 15 s; a group that gets no node within
the timeout is left out and named. A group whose step saw fewer GPUs than its GRES names
is kept with that shortfall: its units are not checked, and the run says why.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from torchcanary.errors import FleetError
from torchcanary.fleet import slurm_cli
from torchcanary.fleet.slurm_cli import SlurmNode
from torchcanary.fleet.slurm_job_line import export_list, node_command
from torchcanary.fleet.slurm_placement import PROFILE_FEATURE, gres, placement
from torchcanary.node_kit.devices import GPU_VARIABLES, listed

GroupKey = tuple[tuple[str, ...], tuple[str, ...], int]


def group_key(node: SlurmNode) -> GroupKey:
    """What makes two nodes alike to Slurm: features, GRES and CPUs."""
    return node.features, node.gres, node.cpus


def print_waiting(line: str) -> None:
    """A discovery step's wait, said on standard error as the run's other notes are."""
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class GroupFacts:
    """One group's hardware facts as its discovery step read them, and why its units
    cannot be checked ("" when they can)."""

    facts: Mapping[str, Any]
    shortfall: str


class GroupReader:
    """Reads each group's facts once per executor: a later look (a drill's, while its
    hosts hold the nodes) must not wait for a free CPU."""

    def __init__(
        self, partition: str, site_flags: list[str], say: Callable[[str], None] = print_waiting
    ) -> None:
        self._partition = partition
        self._site_flags = site_flags
        self._say = say
        self._known: dict[GroupKey, GroupFacts] = {}

    def read_all(
        self,
        groups: Mapping[GroupKey, list[SlurmNode]],
        every_node: list[SlurmNode],
        timeout_s: float,
    ) -> list[GroupFacts | None]:
        """Each group's facts (None where it got no node or its step failed), read at once."""
        with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
            return list(pool.map(lambda key: self._read(key, every_node, timeout_s), groups))

    def _read(
        self, key: GroupKey, every_node: list[SlurmNode], timeout_s: float
    ) -> GroupFacts | None:
        if key in self._known:
            return self._known[key]
        members = [node for node in every_node if group_key(node) == key]
        flags = [*placement(members, every_node), *gres(members[0].gpus)]
        step = [
            "-p", self._partition, "-N1", "-n1", *flags, *self._site_flags,
            f"--export={export_list()}",
            *shlex.split(node_command("facts")),
        ]  # fmt: skip
        names = ",".join(node.name for node in members)

        def waiting(seconds: float) -> None:
            self._say(
                f"discovery: waited {seconds:.0f}s for a free node of {names} "
                f"({' '.join(flags) or 'any node'})"
            )

        try:
            said = slurm_cli.run_step(step, timeout_s, waiting)
            facts: dict[str, Any] = json.loads(said.strip().splitlines()[-1])
        except (FleetError, ValueError, IndexError):
            return None
        found = GroupFacts(facts, discovery_shortfall(facts, members[0].gpus))
        self._known[key] = found
        return found


def merge_notes(
    groups: Mapping[GroupKey, list[SlurmNode]], profile_of: Mapping[GroupKey, str]
) -> list[str]:
    """A line for each profile made of several node groups: which groups, and why (one
    ``tcprofile_`` feature names them, or their hardware facts are the same and no such
    feature tells them apart). Their nodes all stay in the profile: a unit may land on
    any of them."""
    merged: dict[str, list[GroupKey]] = {}
    for key in groups:
        if key in profile_of:
            merged.setdefault(profile_of[key], []).append(key)
    return [
        f"profile {profile}: node groups "
        + " and ".join(_described(key, groups[key]) for key in keys)
        + f" are one profile: {_why_merged(profile, keys)}"
        for profile, keys in sorted(merged.items())
        if len(keys) > 1
    ]


def _why_merged(profile: str, keys: list[GroupKey]) -> str:
    named = f"{PROFILE_FEATURE}{profile}"
    if all(named in features for features, _, _ in keys):
        return f"the feature {named} names them one"
    return f"the same hardware facts, and no {PROFILE_FEATURE} feature to tell them apart"


def _described(key: GroupKey, nodes: list[SlurmNode]) -> str:
    features, gres_items, cpus = key
    names = ",".join(node.name for node in nodes)
    return (
        f"[{names}] (features {','.join(features) or 'none'}; GRES "
        f"{','.join(gres_items) or 'none'}; {cpus} CPUs)"
    )


def discovery_shortfall(facts: Mapping[str, Any], gres_gpus: int) -> str:
    """Why a group's units cannot be checked: its discovery step, given the GPUs its GRES
    names, saw fewer. What it saw is the GPU tool's count (nvidia-smi, rocm-smi) where one
    answered, else the devices Slurm listed in the step's visible-devices variable."""
    if gres_gpus <= 0:
        return ""
    if facts.get("gpu_driver") or facts.get("rocm_version"):
        seen, how = int(facts.get("gpu_count") or 0), "by its GPU tool"
    else:
        visible = facts.get("visible") or {}
        counts = [listed(str(visible[name])) for name in GPU_VARIABLES if name in visible]
        seen, how = min(counts, default=0), "in its visible-devices variable (no GPU tool)"
    if seen >= gres_gpus:
        return ""
    return f"not checked: discovery saw {seen} of the {gres_gpus} GPUs its GRES names ({how})"
