"""The ``[tool.torchcanary.claims]`` table (and the claims' flags on ``run``), validated.

Keys (defaults in ``ClaimsSettings``):
  probes           glob patterns of probe ids to run (``--probes``); empty means all
  probe_modules    extra modules of probes beyond the entry points (``--probe-module``)
  probe_timeout_s  seconds per probe, overriding each probe's own (``--probe-timeout``)
  release          the claims pack to qualify against (``--release``); none follows the
                   candidate's pinned release
  regression       older packs checked on purpose: do their claims still hold?
                   (``--regression``)
  reuse            keep verdicts for later runs of the same environments and use the kept
                   ones (``claims/kept_verdicts.py``); ``--fresh-claims`` sets it false

The claims offer the other sections ``probe_modules`` (``outputs``): the diff and the calls
read the claims pack's words, extra modules included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchcanary import settings_checks
from torchcanary.claims.view import SECTION
from torchcanary.errors import ConfigError

if TYPE_CHECKING:
    from torchcanary.plan import RunPlan

_KEYS = ("probes", "probe_modules", "probe_timeout_s", "release", "regression", "reuse")


@dataclass(frozen=True)
class ClaimsSettings:
    probes: tuple[str, ...] = ()
    probe_modules: tuple[str, ...] = ()
    probe_timeout_s: float | None = None
    release: str | None = None
    regression: tuple[str, ...] = ()
    reuse: bool = True

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("probes", "probe_modules", "regression"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClaimsSettings:
        known = {k: v for k, v in data.items() if k in _KEYS}
        for key in ("probes", "probe_modules", "regression"):
            known[key] = tuple(known.get(key, ()))
        return cls(**known)


def of(plan: RunPlan) -> ClaimsSettings:
    """The claims' settings in ``plan`` (the defaults where the plan has none)."""
    return ClaimsSettings.from_json(plan.section_settings(SECTION))


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the claims table and fill in its defaults."""
    unknown = sorted(set(mapping) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in the claims table; it takes {', '.join(_KEYS)}"
        )
    timeout = mapping.get("probe_timeout_s")
    if timeout is not None:
        timeout = settings_checks.number(
            SECTION, "probe_timeout_s", timeout, above=0, fix="write probe_timeout_s = 60"
        )
    release = mapping.get("release")
    if release is not None and not isinstance(release, str):
        raise settings_checks.unexpected(
            SECTION, "release", "a release", release, 'write release = "2.14"'
        )
    return ClaimsSettings(
        probes=_strings(mapping, "probes", '["c10d.*", "nccl2.*"]'),
        probe_modules=_strings(mapping, "probe_modules", '["myproject.probes"]'),
        probe_timeout_s=timeout,
        release=release or None,
        regression=_strings(mapping, "regression", '["2.13"]'),
        reuse=settings_checks.flag(SECTION, "reuse", mapping.get("reuse", True)),
    ).to_json()


def _strings(mapping: Mapping[str, Any], key: str, example: str) -> tuple[str, ...]:
    if key not in mapping:
        return ()
    return settings_checks.strings(SECTION, key, mapping[key], example=example)


def outputs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the claims offer the other sections: their extra probe modules (the claims
    pack's words are read from every probe, these included)."""
    return {"probe_modules": list(settings.get("probe_modules", ()))}
