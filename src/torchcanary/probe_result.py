"""What a probe returns, and one probe's result in one environment as it is stored.

Both sides import this module: the worker runs a probe and hands back its ``Outcome``
(inside someone else's environment, under any torch version), the orchestrator stores and
reads ``ProbeResult`` rows. It therefore uses the standard library only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import SCHEMA_VERSION


class Verdict(str, enum.Enum):
    """How one probe ended in one environment."""

    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    ABSENT = "absent"
    NOT_CHECKABLE = "not-checkable-here"
    ERROR = "error"
    CRASHED = "crashed"
    TIMEOUT = "timeout"

    @property
    def is_failure_of_the_harness(self) -> bool:
        """Error, crash and timeout say nothing about the claim, only that checking broke."""
        return self in (Verdict.ERROR, Verdict.CRASHED, Verdict.TIMEOUT)


@dataclass(frozen=True)
class Outcome:
    """What a probe's ``run`` returns: a verdict, a one-line reason, and its evidence.

    ``evidence`` holds JSON-able facts a skeptic would want (the generated code excerpt,
    the max error, the exception text); ``measurements`` holds named numeric series.
    """

    verdict: Verdict
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    measurements: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "summary": self.summary,
            "evidence": self.evidence,
            "measurements": self.measurements,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(
            verdict=Verdict(data["verdict"]),
            summary=str(data.get("summary", "")),
            evidence=dict(data.get("evidence") or {}),
            measurements={
                k: [float(x) for x in v] for k, v in (data.get("measurements") or {}).items()
            },
        )


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome in one environment of one run, as stored."""

    run_id: str
    env_role: str
    probe_id: str
    outcome: Outcome
    duration_s: float
    started_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "env_role": self.env_role,
            "probe_id": self.probe_id,
            "outcome": self.outcome.to_json(),
            "duration_s": self.duration_s,
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        return cls(
            run_id=data["run_id"],
            env_role=data["env_role"],
            probe_id=data["probe_id"],
            outcome=Outcome.from_json(data["outcome"]),
            duration_s=float(data["duration_s"]),
            started_at=float(data["started_at"]),
        )
