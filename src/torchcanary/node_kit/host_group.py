"""What a section's work across nodes asks of the fleet, whichever engine it is: one host
per node (a :class:`HostGroup`, placed by :meth:`NodeFleet.spread`), the nodes and their
profiles, and whether a node is still alive. The fleet's executors (``fleet/executor.py``)
provide it; the bench and the drill type against it alone, so they never import the fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from torchcanary.hardware_profile import FleetNode


@dataclass(frozen=True)
class HostPlace:
    """Where one member of a host group runs; ``is_head``: killing that node ends the
    cluster (Ray's head node), so a drill must not strike it."""

    node_id: str
    address: str
    is_head: bool


class HostGroup(Protocol):
    """One host per node on distinct nodes, called by index; a call to a gone member is None.

    ``places[i]`` is where member ``i`` runs; ``gone`` holds the members whose node (or
    host) went away.
    """

    places: list[HostPlace]
    gone: set[int]

    def spare_nodes(self) -> list[HostPlace]:
        """Live nodes able to hold a member that hold none of this group."""
        ...

    def add_member(self) -> int | None:
        """One more member on a spare node (a dead one's replacement); its index, or None."""
        ...

    def call(self, index: int, method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """``method(*args)`` on member ``index``; None once it is gone."""
        ...

    def call_all(self, method: str, *args: Any, timeout_s: float = 600.0) -> list[Any]:
        """``method(*args)`` on every live member at once; None for a gone one."""
        ...

    def call_each(
        self, method: str, args_by_index: Sequence[Sequence[Any]], timeout_s: float = 600.0
    ) -> list[Any]:
        """``method(*args_by_index[i])`` on every member i at once; None for a gone one."""
        ...

    def close(self) -> None:
        """Every member's ``close`` (its processes killed), then the members themselves."""
        ...


class NodeFleet(Protocol):
    """The fleet as work across nodes sees it. ``engine`` names what is underneath
    (``"ray"`` or ``"slurm"``, as ``fleet.json`` records it)."""

    @property
    def engine(self) -> str: ...

    def discover(self, timeout_s: float = 60.0) -> list[FleetNode]:
        """Every live node that answered within ``timeout_s`` with its hardware profile."""
        ...

    def node_alive(self, node_id: str) -> bool:
        """Whether the engine still counts ``node_id`` among its live nodes."""
        ...

    def notice_bound(self) -> tuple[float, str]:
        """The longest the engine may take to count a node that went silent gone (seconds),
        and why that long: how long a node kill's drill waits for ``node_alive`` to say so."""
        ...

    def spread(
        self,
        host_class: type,
        count: int,
        args: Sequence[Any],
        timeout_s: float = 60.0,
        gpus: int = 0,
    ) -> HostGroup:
        """``count`` instances of ``host_class``, each on a different node, each holding one
        CPU and ``gpus`` GPUs there; member i is ``host_class(i, *args)``. FleetError when
        the fleet has no ``count`` such nodes within ``timeout_s``: never ranks sharing a
        node."""
        ...
