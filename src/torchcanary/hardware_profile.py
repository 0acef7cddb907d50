"""Hardware profiles: what a node is, which nodes are alike, and which of them run.

A profile is the set of hardware facts that can change a claim's verdict or a benchmark's
speed (GPU model and count, driver, CUDA or ROCm, CPU, OS). Nodes with the same profile
answer the same questions, so by default one node per profile runs. A Ray node label
``torchcanary.profile`` names the profile outright and wins over the facts: the team knows
its fleet better than nvidia-smi does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from torchcanary.errors import ConfigError

PROFILE_LABEL = "torchcanary.profile"
PROFILE_SCHEMA = 1


@dataclass(frozen=True)
class HardwareProfile:
    """One node's hardware, as read on the node; ``label`` is the team's name for it."""

    gpu_model: str = ""
    gpu_count: int = 0
    gpu_driver: str = ""
    cuda_version: str = ""
    rocm_version: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0
    arch: str = ""
    os: str = ""
    label: str = ""

    @property
    def key(self) -> str:
        """A stable, readable name: the label if set, else a summary plus a short hash.

        The hash covers every fact, so two nodes differing only in driver or OS get
        different keys, and the same hardware gets the same key on every run.
        """
        if self.label:
            return self.label
        facts = {k: v for k, v in asdict(self).items() if k != "label"}
        digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:8]
        if self.gpu_count:
            summary = f"{self.gpu_count}x{self.gpu_model}"
        else:
            summary = f"cpu-{self.arch}-{self.cpu_model}-{self.cpu_cores}c"
        return f"{_slug(summary)}-{digest}"

    def to_json(self) -> str:
        return json.dumps({"schema": PROFILE_SCHEMA, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HardwareProfile:
        data = json.loads(text)
        if data.pop("schema", None) != PROFILE_SCHEMA:
            raise ValueError(f"hardware profile schema is not {PROFILE_SCHEMA}")
        return cls(**data)

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any], labels: Mapping[str, str]) -> HardwareProfile:
        """The profile from a node's collected facts and its Ray node labels."""
        known = {f.name for f in fields(cls)} - {"label"}
        return cls(
            **{k: v for k, v in facts.items() if k in known},
            label=labels.get(PROFILE_LABEL, ""),
        )


@dataclass(frozen=True)
class FleetNode:
    """A live node of the fleet: its executor-side id, address and hardware profile."""

    node_id: str
    address: str
    profile: HardwareProfile
    # What the executor lets one unit hold on the node: a section takes all of it, so two
    # sections never share (and disturb) one machine, as in a run on one machine.
    cpus: float = 1.0
    # The node's GPUs and other accelerators as the engine counts them (its resources,
    # e.g. Ray's ``--num-gpus``), which may differ from what the hardware facts found.
    gpus: int = 0
    accelerators: tuple[tuple[str, float], ...] = ()
    # Why its units cannot be checked, as discovery found ("" when they can): e.g. its
    # discovery step saw fewer GPUs than the engine gives it. None are sent; the run says why.
    shortfall: str = ""


def group_by_profile(nodes: Iterable[FleetNode]) -> dict[str, list[FleetNode]]:
    """Nodes grouped by profile key; keys and nodes in a stable (sorted) order."""
    groups: dict[str, list[FleetNode]] = {}
    for node in sorted(nodes, key=lambda node: node.node_id):
        groups.setdefault(node.profile.key, []).append(node)
    return dict(sorted(groups.items()))


@dataclass(frozen=True)
class NodeSelection:
    """Which nodes run: one per profile (default) or all, among those matching ``filters``.

    ``filters`` map a profile field (or ``key``) to the value it must have; values compare
    as case-insensitive text, so ``gpu_count=8`` and ``gpu_model=nvidia h100`` both work.
    Different keys must all match; one key given twice takes either value.
    """

    every_node: bool = False
    filters: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, nodes: str = "profile", selectors: Sequence[str] = ()) -> NodeSelection:
        """From ``--fleet-nodes`` (``profile`` or ``all``) and ``--fleet-select KEY=VALUE``."""
        if nodes not in ("profile", "all"):
            raise ConfigError(f"--fleet-nodes is 'profile' or 'all', not {nodes!r}")
        filters = []
        for selector in selectors:
            name, sep, value = selector.partition("=")
            name = name.strip()
            if not sep or not name:
                raise ConfigError(f"--fleet-select takes KEY=VALUE, got {selector!r}")
            if name not in _SELECTABLE:
                raise ConfigError(
                    f"--fleet-select: unknown key {name!r}; use one of {', '.join(_SELECTABLE)}"
                )
            filters.append((name, value.strip()))
        return cls(every_node=nodes == "all", filters=tuple(filters))

    def choose(self, nodes: Iterable[FleetNode]) -> list[FleetNode]:
        """The nodes to run on, in profile-key order."""
        matching = [node for node in nodes if self._matches(node.profile)]
        chosen: list[FleetNode] = []
        for group in group_by_profile(matching).values():
            chosen.extend(group if self.every_node else group[:1])
        return chosen

    def _matches(self, profile: HardwareProfile) -> bool:
        """Every key named must match; a key named twice matches either value."""
        wanted: dict[str, set[str]] = {}
        for name, value in self.filters:
            wanted.setdefault(name, set()).add(value.casefold())
        for name, values in wanted.items():
            actual = profile.key if name == "key" else getattr(profile, name)
            if str(actual).casefold() not in values:
                return False
        return True


_SELECTABLE = ("key", *(f.name for f in fields(HardwareProfile)))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", text.casefold()).strip("-")
