"""Finds packs through the ``torchcanary.packs`` entry-point group and checks each one.

An entry point names a package holding ``pack.json``. A pack's probes are those defined in
that package's modules and in the modules its data file names; every probe a claim names
must be among them. Both checks happen here, so a bad pack fails before anything runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from torchcanary.errors import ConfigError
from torchcanary.packs.model import PACK_FILE, Pack, PackError, load_pack_file
from torchcanary.probe import Probe, probes_in_module
from torchcanary.probe_registry import ProbeDiscoveryError, ProbeSource, discover, walk_modules

ENTRY_POINT_GROUP = "torchcanary.packs"
# Found even from a source tree that was never installed (no entry points registered).
BUILTIN_PACKS = {
    "sanity": "torchcanary.packs.builtin.sanity",
    "pytorch-2.13": "torchcanary.packs.builtin.pytorch_2_13",
    "pytorch-2.14": "torchcanary.packs.builtin.pytorch_2_14",
}


@dataclass(frozen=True)
class InstalledPack:
    """A checked pack and its probes by id, in the order its claims name them."""

    pack: Pack
    probes: dict[str, tuple[Probe, ProbeSource]]


def _pack_targets() -> list[tuple[str, str]]:
    targets = {ep.name: ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name, module in BUILTIN_PACKS.items():
        targets.setdefault(name, module)
    return sorted(targets.items())


def _load(entry_name: str, module_name: str) -> InstalledPack:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken pack must name itself, not kill discovery
        raise PackError(f"pack {entry_name!r} ({module_name}) failed to import: {exc}") from exc
    directory = Path(module.__file__ or "").parent
    if not (directory / PACK_FILE).is_file():
        raise PackError(f"pack {entry_name!r}: {module_name} has no {PACK_FILE} next to it")
    pack = load_pack_file(directory / PACK_FILE, module_name)
    probes: dict[str, tuple[Probe, ProbeSource]] = {}
    for target in (module_name, *pack.probe_modules):
        try:
            modules = walk_modules(target)
        except Exception as exc:
            raise PackError(f"pack {pack.name!r}: probe module {target} failed: {exc}") from exc
        for probe_module in modules:
            for probe in probes_in_module(probe_module):
                probes[probe.id] = (probe, ProbeSource(pack.name, probe_module.__name__))
    for claim in pack.claims:
        for probe_id in claim.probes:
            if probe_id not in probes:
                raise PackError(
                    f"pack {pack.name!r}: claim {claim.id} names probe {probe_id!r}, which no "
                    f"module of the pack defines ({', '.join((module_name, *pack.probe_modules))})"
                )
    named = pack.probe_ids()
    ordered = {pid: probes[pid] for pid in named} | {
        pid: entry for pid, entry in sorted(probes.items()) if pid not in named
    }
    return InstalledPack(pack, ordered)


def discover_packs() -> list[InstalledPack]:
    """Every installed pack, checked; release-independent ones first."""
    found = [_load(name, module) for name, module in _pack_targets()]
    by_release: dict[str, str] = {}
    for item in found:
        release = item.pack.release
        if release in by_release and not item.pack.release_independent:
            raise PackError(
                f"two packs claim release {release}: {by_release[release]} and "
                f"{item.pack.module}; uninstall one"
            )
        by_release[release] = item.pack.module
    return sorted(found, key=lambda item: (not item.pack.runs_first, item.pack.release))


def plugin_probes(extra_modules: tuple[str, ...] = ()) -> dict[str, tuple[Probe, ProbeSource]]:
    """The probes of the ``torchcanary.probes`` entry points and ``extra_modules``; a plugin
    that cannot be loaded is the user's mistake, said in one line."""
    try:
        return discover(extra_modules)
    except ProbeDiscoveryError as exc:
        raise ConfigError(
            f"{exc}; fix or uninstall that plugin, or leave it out of --probe-module"
        ) from exc
    except ModuleNotFoundError as exc:
        raise ConfigError(f"probe module not found: {exc.name}; check --probe-module") from exc


def installed_probes(extra_modules: tuple[str, ...] = ()) -> dict[str, tuple[Probe, ProbeSource]]:
    """Every probe installed, by id: each pack's (the first pack to name an id has it), then
    the plugins' probes no pack holds."""
    probes: dict[str, tuple[Probe, ProbeSource]] = {}
    for item in discover_packs():
        for pid, found in item.probes.items():
            probes.setdefault(pid, found)
    for pid, found in plugin_probes(extra_modules).items():
        probes.setdefault(pid, found)
    return dict(sorted(probes.items()))
