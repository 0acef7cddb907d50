"""The explain section's table: how much to explain, and within what time.

``mode``: ``off`` (nothing), ``quick`` (the default: few repeats, the main job's time goal
holds) or ``full`` (more repeats, tighter intervals, no budget cap). ``budget_fraction``:
at most this part of the time this invocation took before explaining (default a quarter);
a finding left when it is spent is reported "not explained: budget". ``repeats``:
measurements per arm of each counterfactual (default by mode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchcanary import settings_checks

SECTION = "explain"
MODES = ("off", "quick", "full")
_REPEATS = {"off": 0, "quick": 5, "full": 11}


@dataclass(frozen=True)
class ExplainSettings:
    mode: str = "quick"
    budget_fraction: float = 0.25
    repeats: int = 0  # 0: by mode

    @property
    def rounds(self) -> int:
        """Measurements per arm: the one asked for, else the mode's."""
        return self.repeats or _REPEATS[self.mode]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExplainSettings:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``[tool.torchcanary.explain]``: mode, budget_fraction, repeats."""
    known = {f.name for f in dataclasses.fields(ExplainSettings)}
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise settings_checks.refusal(
            SECTION,
            unknown[0],
            "is not a key of this table",
            f"use one of {', '.join(sorted(known))}",
        )
    values: dict[str, Any] = {}
    if "mode" in mapping:
        if mapping["mode"] not in MODES:
            raise settings_checks.unexpected(
                SECTION, "mode", " or ".join(MODES), mapping["mode"], 'write mode = "quick"'
            )
        values["mode"] = mapping["mode"]
    if "budget_fraction" in mapping:
        values["budget_fraction"] = settings_checks.number(
            SECTION,
            "budget_fraction",
            mapping["budget_fraction"],
            above=0,
            high=4,
            fix="give a fraction of the run's time, e.g. budget_fraction = 0.25",
        )
    if "repeats" in mapping:
        values["repeats"] = settings_checks.number(
            SECTION,
            "repeats",
            mapping["repeats"],
            integer=True,
            low=3,
            high=101,
            fix="give measurements per arm, e.g. repeats = 7",
        )
    return ExplainSettings(**values).to_json()
