"""The run plan: everything a run will do, decided before it starts, stored with the run.

Flags and config files both end here; ``--resume`` reloads it from the store, so a resumed
run does exactly what the interrupted one meant to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

INSTALLERS = ("auto", "uv", "pip")  # what may fill a new environment
COMPANION_MODES = ("as-given", "auto")  # how the torch family meets each side's torch
# The embedded default (``make run``, a plain ``torchcanary run``): the one place it is set.
DEFAULT_BASELINE = "torch==2.13.0 numpy"
DEFAULT_CANDIDATE = "torch==2.14.1 numpy"
SCHEMA = 2  # 2: the claims' own settings moved into their table; the sections' outputs
# What schema 1 kept at the top of the plan and a section's table holds now (the claims').
MOVED_IN_SCHEMA_2 = ("probes", "probe_modules", "probe_timeout_s", "release", "regression")


@dataclass(frozen=True)
class RunPlan:
    """``settings``: each section's validated settings, by section; ``outputs``: what the
    sections offer one another, by name (each section's ``outputs``), collected by
    ``sections.collect_outputs``: a section reads another's input here, never its settings."""

    baseline: str
    candidate: str
    sections: tuple[str, ...] = ()  # in run order; config fills in every registered one
    installer: str = "auto"  # uv where it is installed, else pip (envs/cache.py)
    companions: str = "as-given"  # or auto: the torch family paired per side (envs/companions.py)
    policy: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # per section
    outputs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        """A stored plan of this schema (one of schema 1, which kept a section's settings
        at its top, is brought forward first by ``sections.load_plan``)."""
        moved = [key for key in MOVED_IN_SCHEMA_2 if key in data]
        if data.get("schema", 1) < SCHEMA and moved:
            raise ValueError(f"a plan of schema 1 with {moved}: load it with sections.load_plan")
        data = {k: v for k, v in data.items() if k != "schema"}
        data["sections"] = tuple(data.get("sections", ()))
        return cls(**data)

    def section_settings(self, section: str) -> dict[str, Any]:
        return dict(self.settings.get(section, {}))
