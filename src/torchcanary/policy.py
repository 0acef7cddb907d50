"""The go / no-go decision: each section states its objections under one policy.

The policy is a flat table of thresholds. Each section module declares the keys it reads
in ``POLICY_DEFAULTS``; a policy file (TOML, keys at the top level or under ``[policy]``)
overrides them, and an unknown key is a configuration error rather than a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.config_toml import tomllib
from torchcanary.errors import ConfigError
from torchcanary.report.view import RunView
from torchcanary.sections import section_module


@dataclass(frozen=True)
class Decision:
    go: bool
    reasons: tuple[str, ...]

    @property
    def label(self) -> str:
        return "go" if self.go else "no-go"

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.label, "reasons": list(self.reasons)}


def policy_defaults(sections: tuple[str, ...]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for section in sections:
        defaults.update(getattr(section_module(section), "POLICY_DEFAULTS", {}))
    return defaults


def resolve_policy(overrides: dict[str, Any], sections: tuple[str, ...]) -> dict[str, Any]:
    """Defaults with ``overrides`` applied; unknown keys and wrong types are refused."""
    defaults = policy_defaults(sections)
    for key, value in overrides.items():
        if key not in defaults:
            raise ConfigError(
                f"unknown policy key {key!r}; known keys: {', '.join(sorted(defaults))}"
            )
        expected = type(defaults[key])
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected):
            raise ConfigError(f"policy key {key!r} must be a {expected.__name__}, not {value!r}")
    return defaults | overrides


def load_policy_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"policy file {path} does not exist; check --policy") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policy file {path} is not valid TOML: {exc}") from None
    table = data.get("policy", data)
    if not isinstance(table, dict):
        raise ConfigError(f"policy file {path}: [policy] must be a table")
    return dict(table)


def decide(
    view: RunView,
    policy: dict[str, Any],
    sections: tuple[str, ...],
    section_failures: dict[str, str],
) -> Decision:
    reasons: list[str] = []
    for section in sections:
        if section in section_failures:
            reasons.append(f"section {section} could not finish: {section_failures[section]}")
            continue
        reasons += section_module(section).blocking_reasons(view, policy)
    return Decision(not reasons, tuple(reasons))
