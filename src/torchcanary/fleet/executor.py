"""What every fleet executor provides, so a Slurm executor can follow the Ray one.

An executor knows the nodes it can reach and their hardware profiles, and runs work units
on the node each is assigned to, handing every result back as soon as it is finished. The
run never learns which engine is underneath.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from torchcanary.fleet.profile import FleetNode
from torchcanary.fleet.unit import UnitResult, WorkUnit


@dataclass(frozen=True)
class Assignment:
    """One unit to run on one node."""

    node: FleetNode
    unit: WorkUnit


class Executor(Protocol):
    """A connection to a fleet; ``close`` releases it (use as a context manager)."""

    def discover(self) -> list[FleetNode]:
        """Every live node that answered with its hardware profile."""
        ...

    def dispatch_streaming(self, assignments: Sequence[Assignment]) -> Iterator[UnitResult]:
        """Send every assignment now; the iterator yields each result the moment it exists.

        A unit's worker yields pieces: each comes back as a PARTIAL result, before the
        unit's one final result. Every assignment ends in exactly one final result: a unit
        whose node died or vanished comes back LOST, never missing; the others go on.
        """
        ...

    def close(self) -> None:
        """Disconnect; nothing started by this executor stays behind on the driver."""
        ...
