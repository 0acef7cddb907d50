"""The run plan: everything a run will do, decided before it starts, stored with the run.

Flags and config files both end here; ``--resume`` reloads it from the store, so a resumed
run does exactly what the interrupted one meant to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

INSTALLERS = ("auto", "uv", "pip")  # what may fill a new environment
# The embedded default (``make run``, a plain ``torchcanary run``): the one place it is set.
DEFAULT_BASELINE = "torch==2.13.0 numpy"
DEFAULT_CANDIDATE = "torch==2.14.1 numpy"


@dataclass(frozen=True)
class RunPlan:
    baseline: str
    candidate: str
    sections: tuple[str, ...] = ()  # in run order; config fills in every registered one
    probes: tuple[str, ...] = ()  # glob patterns of probe ids; empty means all
    probe_modules: tuple[str, ...] = ()  # extra probe modules beyond the entry points
    installer: str = "auto"  # uv where it is installed, else pip (envs/cache.py)
    probe_timeout_s: float | None = None  # overrides each probe's own timeout when set
    policy: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # per section
    release: str | None = None  # the claims pack to qualify against; None follows the candidate
    regression: tuple[str, ...] = ()  # older packs checked on purpose ("still true?")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = 1
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        data = {k: v for k, v in data.items() if k != "schema"}
        for key in ("sections", "probes", "probe_modules", "regression"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)

    def section_settings(self, section: str) -> dict[str, Any]:
        return dict(self.settings.get(section, {}))
