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
from typing import Protocol

from torchcanary.fleet.secrets import strip_data, strip_text
from torchcanary.fleet.unit import UnitResult, WorkUnit
from torchcanary.hardware_profile import FleetNode
from torchcanary.node_kit.host_group import NodeFleet


@dataclass(frozen=True)
class Assignment:
    """One unit to run on one node; ``estimate_s``: how long the same unit took before
    (``unit_time.unit_estimate``; None: never seen), which sizes an engine's time limit."""

    node: FleetNode
    unit: WorkUnit
    estimate_s: float | None = None


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


class Executor(NodeFleet, Protocol):
    """A connection to a fleet; ``close`` releases it (use as a context manager).

    What work across nodes asks of it (``engine``, ``discover``, ``spread``...) is declared
    in ``node_kit/host_group.py``; ``silent_nodes`` are the nodes the last ``discover``
    could not hear from, and ``discovery_notes`` what else it has to say of them (groups
    merged into a profile).
    """

    silent_nodes: list[str]
    discovery_notes: list[str]

    def __enter__(self) -> Executor: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def dispatch_streaming(self, assignments: Sequence[Assignment]) -> Iterator[UnitResult]:
        """Send every assignment now; the iterator yields each result the moment it exists.

        A unit's worker yields pieces: each comes back as a PARTIAL result, before the
        unit's one final result. Every assignment ends in exactly one final result: a unit
        whose node died or vanished comes back LOST, never missing; the others go on.
        """
        ...

    def require_nodes(self, count: int, gpus: int = 0) -> None:
        """FleetError at once when fewer than ``count`` live nodes each have a CPU and
        ``gpus`` GPUs (``spread`` would otherwise wait out its timeout to say so)."""
        ...

    def close(self) -> None:
        """Disconnect; nothing started by this executor stays behind on the driver."""
        ...
