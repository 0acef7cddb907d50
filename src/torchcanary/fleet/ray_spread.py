"""Actors on distinct nodes of a Ray cluster: one rank host per node for multi-node work.

``spread_group`` reserves one CPU (and the GPUs asked for) on each of ``count`` different
nodes (a STRICT_SPREAD placement group) and starts an actor in each; the ``SpreadGroup``
(Ray's ``HostGroup``, ``fleet/executor.py``) calls them by index, notices a member whose
node died, and can add a replacement on a spare node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from torchcanary.errors import FleetError
from torchcanary.node_kit.host_group import HostGroup, HostPlace


def spread_group(
    ray: ModuleType,
    host_class: type,
    count: int,
    args: Sequence[Any],
    timeout_s: float = 60.0,
    gpus: int = 0,
) -> SpreadGroup:
    """``count`` instances of ``host_class``, each on a different node (STRICT_SPREAD).

    Each holds one CPU and ``gpus`` GPUs of its node (its bundle carries them, and the
    actor asks for them, so Ray sets its visible devices). FleetError when the cluster has
    fewer than ``count`` such nodes free within ``timeout_s``: a multi-node drill never
    falls back to ranks sharing a node.
    """
    from ray.util.placement_group import (
        placement_group,
        placement_group_table,
        remove_placement_group,
    )
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([held(gpus)] * count, strategy="STRICT_SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise FleetError(
            f"the Ray cluster has no {count} distinct nodes with a free CPU{_and_gpus(gpus)} "
            f"(STRICT_SPREAD placement group not ready within {timeout_s:.0f}s); "
            f"add nodes or lower --nodes"
        )
    node_ids = placement_group_table(group)["bundles_to_node_id"]
    addresses = {
        node["NodeID"]: node.get("NodeManagerAddress", "")
        for node in ray.nodes()
        if node.get("Alive")
    }
    head_ids = {
        node["NodeID"]
        for node in ray.nodes()
        if "node:__internal_head__" in (node.get("Resources") or {})
    }
    actor_class = ray.remote(host_class)
    handles = [
        actor_class.options(
            num_cpus=1,
            num_gpus=gpus,
            max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=index
            ),
        ).remote(index, *args)
        for index in range(count)
    ]
    places = [
        HostPlace(node_ids[i], addresses.get(node_ids[i], ""), node_ids[i] in head_ids)
        for i in range(count)
    ]
    member = (actor_class, args, gpus)
    return SpreadGroup(ray, group, handles, places, remove_placement_group, member)


def held(gpus: int) -> dict[str, float]:
    """What one member holds on its node: a CPU, and ``gpus`` GPUs when asked."""
    return {"CPU": 1, "GPU": gpus} if gpus else {"CPU": 1}


def can_hold(node: dict[str, Any], gpus: int) -> bool:
    """Whether a node of ``ray.nodes()`` is alive with room for one member."""
    resources = node.get("Resources") or {}
    return bool(node.get("Alive")) and all(
        resources.get(name, 0) >= amount for name, amount in held(gpus).items()
    )


def _and_gpus(gpus: int) -> str:
    return f" and {gpus} GPU(s)" if gpus else ""


class SpreadGroup:
    """Actors on distinct nodes, called by index; a call to a dead node's actor is None."""

    def __init__(
        self,
        ray: ModuleType,
        group: Any,
        handles: list[Any],
        places: list[HostPlace],
        remove: Callable[[Any], None],
        member: tuple[Any, Sequence[Any], int],
    ) -> None:
        self._ray = ray
        self._group = group
        self._handles = handles
        self.places = places
        self._remove = remove
        self._member = member  # the actor class, its arguments after the index, its GPUs
        self.gone: set[int] = set()

    def spare_nodes(self) -> list[HostPlace]:
        """Live nodes with room for a member (a CPU, its GPUs) that hold none of the group."""
        taken = {place.node_id for place in self.places}
        return [
            HostPlace(
                node["NodeID"],
                node.get("NodeManagerAddress", ""),
                "node:__internal_head__" in (node.get("Resources") or {}),
            )
            for node in self._ray.nodes()
            if node["NodeID"] not in taken and can_hold(node, self._member[2])
        ]

    def add_member(self) -> int | None:
        """One more member on a spare node (a replacement for a dead one); its index, or
        None when the cluster has no spare node.

        It is pinned to that node, outside the placement group: the group's bundle on a
        dead node is Ray's to reschedule, and the drill must know where its member runs.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        spare = self.spare_nodes()
        if not spare:
            return None
        place = spare[0]
        actor_class, args, gpus = self._member
        index = len(self._handles)
        self._handles.append(
            actor_class.options(
                num_cpus=1,
                num_gpus=gpus,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(place.node_id, soft=False),
            ).remote(index, *args)
        )
        self.places.append(place)
        return index

    def call(self, index: int, method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """``method(*args)`` on member ``index``; None once its node (or actor) is gone."""
        if index in self.gone:
            return None
        try:
            ref = getattr(self._handles[index], method).remote(*args)
            return self._ray.get(ref, timeout=timeout_s)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
            self.gone.add(index)
            return None

    def call_all(self, method: str, *args: Any, timeout_s: float = 600.0) -> list[Any]:
        """``method(*args)`` on every live member at once; None for a gone one."""
        return self.call_each(method, [args] * len(self._handles), timeout_s)

    def call_each(
        self, method: str, args_by_index: Sequence[Sequence[Any]], timeout_s: float = 600.0
    ) -> list[Any]:
        """``method(*args_by_index[i])`` on every member i at once; None for a gone one."""
        refs = {
            index: getattr(handle, method).remote(*args_by_index[index])
            for index, handle in enumerate(self._handles)
            if index not in self.gone
        }
        results: list[Any] = [None] * len(self._handles)
        for index, ref in refs.items():
            try:
                results[index] = self._ray.get(ref, timeout=timeout_s)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                self.gone.add(index)
        return results

    def close(self) -> None:
        """Every member's ``close`` (its processes killed), then the actors and the group."""
        self.call_all("close", timeout_s=60.0)
        for handle in self._handles:
            with contextlib.suppress(Exception):
                self._ray.kill(handle)
        with contextlib.suppress(Exception):
            self._remove(self._group)


if TYPE_CHECKING:
    # mypy holds SpreadGroup to the HostGroup protocol here, not at a user's desk.
    _conforms: type[HostGroup] = SpreadGroup
