"""The plain data that crosses process and disk boundaries.

Both sides import this module: the worker (inside someone else's environment, under any
torch version) and the orchestrator. It therefore uses the standard library only. Every
record is a frozen dataclass with a lossless JSON form; ``SCHEMA_VERSION`` changes whenever
that form does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


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


class ClaimComparison(str, enum.Enum):
    """What a claim's two per-environment verdicts mean for the upgrade."""

    NEW_IN_CANDIDATE = "new in candidate"
    ALREADY_IN_BASELINE = "already in baseline"
    NOT_REPRODUCED = "not reproduced"
    REGRESSED = "regressed"
    UNVERIFIED = "unverified here"


def compare_claim(baseline: Verdict, candidate: Verdict) -> ClaimComparison:
    """Combine the baseline's and candidate's verdicts on one claim."""
    if candidate is Verdict.NOT_CHECKABLE:
        return ClaimComparison.UNVERIFIED
    if candidate is Verdict.CONFIRMED:
        if baseline is Verdict.CONFIRMED:
            return ClaimComparison.ALREADY_IN_BASELINE
        return ClaimComparison.NEW_IN_CANDIDATE
    if baseline is Verdict.CONFIRMED:
        # Worked before, does not now: whether refuted, absent or broken, it is a regression.
        return ClaimComparison.REGRESSED
    if candidate.is_failure_of_the_harness:
        return ClaimComparison.UNVERIFIED
    return ClaimComparison.NOT_REPRODUCED


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


@dataclass(frozen=True)
class Manifest:
    """What an environment is: collected inside it by the worker, stored as a flat dict.

    Kept as a mapping rather than fixed fields because torch versions expose different
    facts; ``CONFOUND_KEYS`` names the ones that matter when two environments are compared.
    """

    facts: dict[str, Any]

    CONFOUND_KEYS = (
        "torch_build_variant",
        "cuda_version",
        "cuda_arch_list",
        "hip_version",
        "python_version",
        "blas",
        "mkldnn_version",
        "openmp",
        "torch_num_threads",
        "cpu_capability",
        "compiler",
        "numpy_version",
    )

    def to_json(self) -> dict[str, Any]:
        return dict(self.facts)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(facts=dict(data))

    def confounds_against(self, other: Manifest) -> dict[str, tuple[Any, Any]]:
        """Facts other than the torch version on which two environments differ."""
        return {
            key: (self.facts.get(key), other.facts.get(key))
            for key in self.CONFOUND_KEYS
            if self.facts.get(key) != other.facts.get(key)
        }
