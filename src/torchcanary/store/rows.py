"""The rows a store hands back, the same whichever engine holds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchcanary.results import Manifest


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
    section: str
    key: str
    env_role: str
    verdict: str
    payload: dict[str, Any]
