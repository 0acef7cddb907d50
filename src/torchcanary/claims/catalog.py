"""The probes a run checks: every discovered probe, narrowed by the plan's id patterns."""

from __future__ import annotations

import fnmatch

from torchcanary.errors import ConfigError
from torchcanary.probe import Probe
from torchcanary.registry import ProbeDiscoveryError, ProbeSource, discover


def select_probes(
    patterns: tuple[str, ...], extra_modules: tuple[str, ...] = ()
) -> dict[str, tuple[Probe, ProbeSource]]:
    """Probes whose id matches any pattern (all when there are none), by id."""
    try:
        found = discover(extra_modules)
    except ProbeDiscoveryError as exc:
        raise ConfigError(
            f"{exc}; fix or uninstall that plugin, or leave it out of --probe-module"
        ) from exc
    except ModuleNotFoundError as exc:
        raise ConfigError(f"probe module not found: {exc.name}; check --probe-module") from exc
    if not patterns:
        return found
    chosen = {
        pid: entry
        for pid, entry in found.items()
        if any(fnmatch.fnmatchcase(pid, pattern) for pattern in patterns)
    }
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(pid, p) for pid in found)]
    if unmatched:
        raise ConfigError(f"no probe matches {unmatched[0]!r}; `torchcanary probes` lists the ids")
    return chosen
