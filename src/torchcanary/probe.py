"""What a probe is: a claim in our own words plus a ``run`` that decides by running the thing.

A probe module imports torch only inside ``run`` so the orchestrator (which never imports
torch) can list probes and their requirements. Probes are found, not listed: a module
exposes ``PROBES`` and is reached through the ``torchcanary.probes`` entry-point group.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from torchcanary.probe_result import Outcome, Verdict

_PROBE_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class Needs:
    """What must be present for a probe's claim to be checkable at all.

    ``devices`` is any-of (e.g. ``("cuda",)``); ``packages`` is all-of.
    ``ranks`` is the smallest process-group size the probe spawns.
    """

    devices: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    ranks: int = 1

    def describe(self) -> str:
        parts = []
        if self.devices:
            parts.append("device " + " or ".join(self.devices))
        if self.packages:
            parts.append("packages " + ", ".join(self.packages))
        if self.ranks > 1:
            parts.append(f"{self.ranks} local ranks")
        return "; ".join(parts) or "nothing special"


@dataclass(frozen=True)
class ProbeContext:
    """What the worker hands a probe: where it may write, and what it was asked for."""

    scratch_dir: str
    devices: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Probe:
    """One executable check of one claim (or one facet of a claim)."""

    id: str
    claim: str
    scope: str
    run: Callable[[ProbeContext], Outcome]
    needs: Needs = Needs()
    timeout_s: float = 180.0
    release_claim: str = ""
    # A probe that times something runs alone: claims runs the others of both environments
    # side by side, which would put the other environment's work on the timed cores.
    timed: bool = False

    def __post_init__(self) -> None:
        if not _PROBE_ID.match(self.id):
            raise ValueError(f"probe id {self.id!r} must be lower-case letters, digits, . _ -")

    @property
    def module(self) -> str:
        return self.run.__module__

    def describe(self) -> dict[str, Any]:
        """The orchestrator-side description: everything but the callable."""
        return {
            "id": self.id,
            "claim": self.claim,
            "release_claim": self.release_claim,
            "scope": self.scope,
            "needs": self.needs.describe(),
            "timeout_s": self.timeout_s,
            "module": self.module,
        }


def confirmed(summary: str, **evidence: Any) -> Outcome:
    return Outcome(Verdict.CONFIRMED, summary, evidence)


def refuted(summary: str, **evidence: Any) -> Outcome:
    return Outcome(Verdict.REFUTED, summary, evidence)


def absent(summary: str, **evidence: Any) -> Outcome:
    return Outcome(Verdict.ABSENT, summary, evidence)


def not_checkable(summary: str, **evidence: Any) -> Outcome:
    """The claim's scope is not on this machine; ``summary`` names what is missing."""
    return Outcome(Verdict.NOT_CHECKABLE, summary, evidence)


def probes_in_module(module: ModuleType) -> list[Probe]:
    """The probes a module exposes in its ``PROBES``."""
    return [p for p in getattr(module, "PROBES", ()) if isinstance(p, Probe)]
