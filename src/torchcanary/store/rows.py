"""The rows a store hands back, the same whichever engine holds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchcanary.results import Manifest, SectionRecord

# The key of the row that sums up a section, and the env_role of a row about both
# environments together (not one of them).
SUMMARY_KEY = "__summary__"
BOTH = "both"
# The artifact that keeps a section's traceback when it broke (on this machine or a node).
SECTION_FAILURE_PREFIX = "section-failure:"


@dataclass(frozen=True)
class RunRow:
    run_id: str
    created_at: float
    finished_at: float | None
    status: str
    plan: dict[str, Any]
    decision: str | None
    decision_detail: dict[str, Any] | None


@dataclass(frozen=True)
class EnvironmentRow:
    role: str
    spec: str
    python: str
    torch_version: str
    build_seconds: float
    reused: bool
    manifest: Manifest


@dataclass(frozen=True)
class SectionResult:
    """One row of ``section_results`` as stored: the payload is plain JSON.

    It is also the record of a section that declares no typed one (a third party's):
    ``to_json``/``from_json`` give the same ``{key, env_role, verdict, payload}`` form as
    the typed records do. Typed sections build the row with :meth:`of`.
    """

    section: str
    key: str
    env_role: str
    verdict: str
    payload: dict[str, Any]

    @classmethod
    def of(cls, section: str, record: SectionRecord) -> SectionResult:
        """The row that stores ``record`` under ``section``."""
        data = record.to_json()
        return cls(section, data["key"], data["env_role"], data["verdict"], data["payload"])

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "env_role": self.env_role,
            "verdict": self.verdict,
            "payload": self.payload,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], section: str = "") -> SectionResult:
        return cls(
            section, data["key"], data["env_role"], str(data["verdict"]), dict(data["payload"])
        )
