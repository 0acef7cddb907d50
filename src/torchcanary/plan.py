"""The run plan: everything a run will do, decided before it starts, stored with the run.

Flags and config files both end here; ``--resume`` reloads it from the store, so a resumed
run does exactly what the interrupted one meant to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from torchcanary.errors import ConfigError

INSTALLERS = ("auto", "uv", "pip")  # what may fill a new environment
# The embedded default (``make run``, a plain ``torchcanary run``): the one place it is set.
DEFAULT_BASELINE = "torch==2.13.0 numpy"
DEFAULT_CANDIDATE = "torch==2.14.1 numpy"
SCHEMA = 2  # 2: the claims' own settings moved into their table; the sections' outputs
# What schema 1 kept at the top of the plan and a section's table holds now (the claims').
_MOVED_IN_SCHEMA_2 = ("probes", "probe_modules", "probe_timeout_s", "release", "regression")


@dataclass(frozen=True)
class RunPlan:
    """``settings``: each section's validated settings, by section; ``outputs``: what the
    sections offer one another, by name (``sections.section_outputs``), collected by
    ``config.py``: a section reads another's input here, never its settings."""

    baseline: str
    candidate: str
    sections: tuple[str, ...] = ()  # in run order; config fills in every registered one
    installer: str = "auto"  # uv where it is installed, else pip (envs/cache.py)
    policy: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # per section
    outputs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        if data.get("schema", 1) < 2:
            data = _upgrade_schema_1(data)
        data = {k: v for k, v in data.items() if k != "schema"}
        data["sections"] = tuple(data.get("sections", ()))
        return cls(**data)

    def section_settings(self, section: str) -> dict[str, Any]:
        return dict(self.settings.get(section, {}))


def _upgrade_schema_1(data: dict[str, Any]) -> dict[str, Any]:
    """A plan stored before the claims' settings moved into their table: its top-level
    ``probes``, ``probe_modules``, ``probe_timeout_s``, ``release`` and ``regression`` go
    to the settings of the section whose table takes them now, and the outputs are what
    its sections' settings offer (as ``config.py`` collects them for a new plan)."""
    from torchcanary.sections import section_names

    upgraded = {k: v for k, v in data.items() if k not in _MOVED_IN_SCHEMA_2}
    settings = {name: dict(table) for name, table in data.get("settings", {}).items()}
    offering = {name: dict(table) for name, table in settings.items()}
    for key, owners in settings_owners(k for k in _MOVED_IN_SCHEMA_2 if k in data).items():
        value = list(data[key]) if isinstance(data[key], list | tuple) else data[key]
        for owner in owners:
            offering.setdefault(owner, {})[key] = value
            if owner in data.get("sections", ()):
                settings.setdefault(owner, {})[key] = value
    upgraded["settings"] = settings
    registered = set(section_names())  # a plugin uninstalled since offers nothing
    upgraded["outputs"] = collect_outputs(
        {name: table for name, table in offering.items() if name in registered}
    )
    return upgraded


def collect_outputs(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the sections with these settings offer one another, by name
    (``sections.section_outputs``); a name offered by two sections is a ConfigError."""
    from torchcanary.sections import get_section, section_outputs  # the registry: lazily

    outputs: dict[str, Any] = {}
    offered_by: dict[str, str] = {}
    for name, parsed in settings.items():
        for key, value in section_outputs(get_section(name), parsed).items():
            if key in offered_by:
                raise ConfigError(
                    f"sections {offered_by[key]!r} and {name!r} both offer the output {key!r}; "
                    "uninstall one of them, or ask its author to rename it"
                )
            outputs[key], offered_by[key] = value, name
    return outputs


def settings_owners(keys: Iterable[str]) -> dict[str, list[str]]:
    """For each of ``keys``, the sections whose tables take it (their default settings
    have it): where a key that is not the plan's own belongs."""
    from torchcanary.sections import get_section, section_names

    owners: dict[str, list[str]] = {key: [] for key in keys}
    for name in section_names():
        try:
            defaults = get_section(name).parse_settings({})
        except ConfigError:
            continue
        for key, found in owners.items():
            if key in defaults:
                found.append(name)
    return owners
