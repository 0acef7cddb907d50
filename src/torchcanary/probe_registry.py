"""Finds probes through the ``torchcanary.probes`` entry-point group.

An entry point names a module; a package is walked for its submodules. Every module that
defines ``PROBES`` (a sequence of :class:`~torchcanary.probe.Probe`) contributes them. Only the
orchestrator uses this (to list and plan); the worker is handed a probe's module and looks it
up by id itself (``worker/run_probe.py``).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import ModuleType

from torchcanary.probe import Probe, probes_in_module

ENTRY_POINT_GROUP = "torchcanary.probes"


class ProbeDiscoveryError(Exception):
    """A plugin's probes could not be loaded (bad module, duplicate id)."""


@dataclass(frozen=True)
class ProbeSource:
    """Where a probe came from: the entry point's name and the module that holds it."""

    plugin: str
    module: str


def walk_modules(module_name: str) -> list[ModuleType]:
    """The module and, when it is a package, every submodule, sorted by name."""
    module = importlib.import_module(module_name)
    modules = [module]
    if hasattr(module, "__path__"):
        for info in sorted(
            pkgutil.walk_packages(module.__path__, module_name + "."), key=lambda i: i.name
        ):
            modules.append(importlib.import_module(info.name))
    return modules


def discover(extra_modules: tuple[str, ...] = ()) -> dict[str, tuple[Probe, ProbeSource]]:
    """All probes by id, from installed entry points plus ``extra_modules``."""
    targets = [(ep.name, ep.value.split(":")[0]) for ep in entry_points(group=ENTRY_POINT_GROUP)]
    if not any(name == "builtin" for name, _ in targets):
        # Running from a source tree that was never installed: still find our own probes.
        targets.append(("builtin", "torchcanary.probes"))
    targets += [(name, name) for name in extra_modules]
    by_id: dict[str, tuple[Probe, ProbeSource]] = {}
    for plugin, module_name in targets:
        try:
            modules = walk_modules(module_name)
        except Exception as exc:  # a broken plugin must name itself, not kill discovery
            raise ProbeDiscoveryError(
                f"probe plugin {plugin!r} ({module_name}) failed to import: {exc}"
            ) from exc
        for module in modules:
            for probe in probes_in_module(module):
                if probe.id in by_id and by_id[probe.id][0] is not probe:
                    raise ProbeDiscoveryError(
                        f"probe id {probe.id!r} is defined twice ({by_id[probe.id][1].module} "
                        f"and {module.__name__}); rename one"
                    )
                by_id[probe.id] = (probe, ProbeSource(plugin, module.__name__))
    return dict(sorted(by_id.items()))
