"""The probes a run checks: the packs it qualifies against, narrowed by the plan's id patterns.

A run checks the release-independent packs (binary sanity) first, then the pack of the
candidate's release (or the one ``--release`` names, which must be the candidate's), then
any older packs asked for on purpose as regression checks (``--regression``). Probes from
the ``torchcanary.probes`` group that belong to no pack run too, under the pack name
``plugins``, so third-party probes keep working without writing a pack.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import TypeVar

from torchcanary.errors import ConfigError
from torchcanary.packs.discovery import (
    InstalledPack,
    discover_packs,
    installed_probes,
    plugin_probes,
)
from torchcanary.packs.model import Pack, PackError
from torchcanary.probe import Probe
from torchcanary.probe_registry import ProbeSource

PLUGINS_PACK = "plugins"
_Chosen = TypeVar("_Chosen")  # what _narrow keeps for each probe id
_TORCH_PIN = re.compile(r"(?:^|\s)torch==([0-9][0-9A-Za-z.+]*)")


@dataclass(frozen=True)
class PlannedProbe:
    """A probe chosen for a run, and the pack whose verdict it gives."""

    pack: str
    probe: Probe
    source: ProbeSource


@dataclass(frozen=True)
class ClaimsSelection:
    """The packs a run qualifies against and their probes by id, in run order."""

    packs: tuple[Pack, ...]
    probes: dict[str, PlannedProbe]


def release_of(version: str) -> str:
    """The release a torch version belongs to: '2.14.1+cu130' -> '2.14'."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def requested_torch(spec: str) -> str | None:
    """The torch version an environment spec pins (``torch==2.14.1 numpy``), if any."""
    found = _TORCH_PIN.search(spec)
    return found.group(1) if found else None


def _by_release(installed: list[InstalledPack], release: str, flag: str) -> InstalledPack:
    for item in installed:
        if item.pack.release == release:
            return item
    known = ", ".join(i.pack.release for i in installed if not i.pack.release_independent)
    raise PackError(
        f"no pack for release {release} is installed (installed: {known or 'none'}); "
        f"check {flag}, or draft one with `torchcanary claims checklist NOTES --release {release}`"
    )


def choose_packs(
    release: str | None,
    regression: tuple[str, ...],
    candidate_version: str | None,
    installed: list[InstalledPack] | None = None,
) -> list[InstalledPack]:
    """Sanity packs, the release pack, then regression packs; a wrong choice is a PackError."""
    installed = discover_packs() if installed is None else installed
    chosen = [item for item in installed if item.pack.release_independent]
    candidate_release = release_of(candidate_version) if candidate_version else None
    if release and candidate_release and release != candidate_release:
        raise PackError(
            f"pack for release {release} but the candidate is torch {candidate_version}; "
            f"use --release {candidate_release}, or --regression {release} to check "
            f"{release}'s claims still hold"
        )
    wanted = release or candidate_release
    if release:
        chosen.append(_by_release(installed, release, "--release"))
    elif wanted and any(i.pack.release == wanted for i in installed):
        chosen.append(_by_release(installed, wanted, "--release"))
    for old in regression:
        item = _by_release(installed, old, "--regression")
        if item not in chosen:
            chosen.append(item)
    return chosen


def _unpacked_probes(
    installed_ids: set[str], extra_modules: tuple[str, ...]
) -> dict[str, PlannedProbe]:
    return {
        pid: PlannedProbe(PLUGINS_PACK, probe, source)
        for pid, (probe, source) in plugin_probes(extra_modules).items()
        if pid not in installed_ids
    }


def _narrow(probes: dict[str, _Chosen], patterns: tuple[str, ...]) -> dict[str, _Chosen]:
    if not patterns:
        return probes
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(pid, p) for pid in probes)]
    if unmatched:
        raise ConfigError(f"no probe matches {unmatched[0]!r}; `torchcanary probes` lists the ids")
    return {
        pid: planned
        for pid, planned in probes.items()
        if any(fnmatch.fnmatchcase(pid, pattern) for pattern in patterns)
    }


def select_claims(
    patterns: tuple[str, ...],
    extra_modules: tuple[str, ...] = (),
    release: str | None = None,
    regression: tuple[str, ...] = (),
    candidate_version: str | None = None,
) -> ClaimsSelection:
    """The packs for this candidate and their probes (plus unpacked plugin probes)."""
    installed = discover_packs()
    chosen = choose_packs(release, regression, candidate_version, installed)
    probes: dict[str, PlannedProbe] = {}
    for item in chosen:
        for pid, (probe, source) in item.probes.items():
            probes.setdefault(pid, PlannedProbe(item.pack.name, probe, source))
    all_pack_ids = {pid for item in installed for pid in item.probes}
    probes |= _unpacked_probes(all_pack_ids, extra_modules)
    return ClaimsSelection(tuple(item.pack for item in chosen), _narrow(probes, patterns))


def select_probes(
    patterns: tuple[str, ...], extra_modules: tuple[str, ...] = ()
) -> dict[str, tuple[Probe, ProbeSource]]:
    """Every probe installed (all packs, all plugins) matching any pattern, by id."""
    return _narrow(installed_probes(extra_modules), patterns)
