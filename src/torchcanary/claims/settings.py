"""The ``[tool.torchcanary.claims]`` table (and ``--fresh-claims``), validated.

Keys (defaults in ``ClaimsSettings``):
  reuse   keep verdicts for later runs of the same environments and use the kept ones
          (``claims/kept_verdicts.py``); ``--fresh-claims`` sets it false
Probes are chosen with ``probes = [...]`` at the top level, not in this table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchcanary import settings_checks
from torchcanary.errors import ConfigError


@dataclass(frozen=True)
class ClaimsSettings:
    reuse: bool = True

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClaimsSettings:
        return cls(**data)


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the claims table and fill in its defaults."""
    unknown = sorted(set(mapping) - {"reuse"})
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in the claims table; it takes 'reuse' (true or "
            "false; choose probes with 'probes = [...]' at the top level)"
        )
    reuse = settings_checks.flag("claims", "reuse", mapping.get("reuse", True))
    return ClaimsSettings(reuse=reuse).to_json()
