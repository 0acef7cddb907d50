"""What every fleet executor provides: the one contract Ray and Slurm both satisfy.

An executor knows the nodes it can reach and their hardware profiles, runs work units on
the node each is assigned to, handing every result back as soon as it is finished, and
places one host per node for work across nodes (``--nodes``). The driver, the ``--nodes``
venues and the CLI type against these protocols only: the run, its reports, its store rows
and ``--resume`` never learn which engine is underneath (``fleet/connect.py`` picks it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Protocol

from torchcanary.fleet.secrets import strip_data, strip_text
from torchcanary.fleet.unit import UnitResult, WorkUnit
from torchcanary.hardware_profile import FleetNode


@dataclass(frozen=True)
class Assignment:
    """One unit to run on one node."""

    node: FleetNode
    unit: WorkUnit


def tagged_result(result: UnitResult, node: FleetNode) -> UnitResult:
    """A unit's result as every executor hands it back: with the node and profile it ran
    on, and with no secret left in it."""
    return replace(
        result,
        output=None if result.output is None else strip_data(dict(result.output)),
        error=None if result.error is None else strip_text(result.error),
        node_id=node.node_id,
        profile_key=node.profile.key,
    )


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


class Executor(Protocol):
    """A connection to a fleet; ``close`` releases it (use as a context manager).

    ``engine`` names what is underneath (``"ray"`` or ``"slurm"``, as ``fleet.json``
    records it); ``silent_nodes`` are the nodes the last ``discover`` could not hear from,
    and ``discovery_notes`` what else it has to say of them (groups merged into a profile).
    """

    @property
    def engine(self) -> str: ...

    silent_nodes: list[str]
    discovery_notes: list[str]

    def __enter__(self) -> Executor: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def discover(self, timeout_s: float = 60.0) -> list[FleetNode]:
        """Every live node that answered within ``timeout_s`` with its hardware profile."""
        ...

    def dispatch_streaming(self, assignments: Sequence[Assignment]) -> Iterator[UnitResult]:
        """Send every assignment now; the iterator yields each result the moment it exists.

        A unit's worker yields pieces: each comes back as a PARTIAL result, before the
        unit's one final result. Every assignment ends in exactly one final result: a unit
        whose node died or vanished comes back LOST, never missing; the others go on.
        """
        ...

    def node_alive(self, node_id: str) -> bool:
        """Whether the engine still counts ``node_id`` among its live nodes."""
        ...

    def notice_bound(self) -> tuple[float, str]:
        """The longest the engine may take to count a node that went silent gone (seconds),
        and why that long: how long a node kill's drill waits for ``node_alive`` to say so."""
        ...

    def require_nodes(self, count: int, gpus: int = 0) -> None:
        """FleetError at once when fewer than ``count`` live nodes each have a CPU and
        ``gpus`` GPUs (``spread`` would otherwise wait out its timeout to say so)."""
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

    def close(self) -> None:
        """Disconnect; nothing started by this executor stays behind on the driver."""
        ...
