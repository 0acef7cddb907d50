"""Which engine a ``--fleet`` address names, and connecting to it.

``slurm`` or ``slurm:PARTITION`` is a Slurm cluster reached from this login node; anything
else is a Ray address (``ray://HEAD:10001``, ``HOST:PORT``, ``auto``). Each engine's module
is imported only here, only when its address is given: a run without ``--fleet`` never
imports Ray, and a Ray run never imports the Slurm executor.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from torchcanary.errors import ConfigError
from torchcanary.fleet.executor import Executor

if TYPE_CHECKING:
    from torchcanary.fleet.slurm_site import SlurmSite

SLURM = "slurm"
# The Slurm executor's module, imported by name so that nothing imports it unasked.
_SLURM_MODULE = "torchcanary.fleet.slurm_executor"


def engine_of(address: str) -> str:
    """``"slurm"`` for ``slurm`` / ``slurm:PARTITION``, else ``"ray"``."""
    return SLURM if address == SLURM or address.startswith(f"{SLURM}:") else "ray"


def connect_fleet(
    address: str,
    *,
    timeout_s: float | None = None,
    fleet_dir: Path | None = None,
    slurm_site: SlurmSite | None = None,
) -> Executor:
    """The executor for ``address``; FleetError or ConfigError (exit 2) when unusable.

    ``timeout_s`` bounds reaching the cluster (None: the engine's default). ``fleet_dir``
    is a folder every node sees (Slurm keeps each unit's files there; Ray ships results
    over its own connection and needs none). ``slurm_site`` holds the site flags every
    Slurm job carries (``fleet/slurm_site.py``).
    """
    if engine_of(address) == SLURM:
        partition = address.partition(":")[2]
        try:
            slurm = importlib.import_module(_SLURM_MODULE)
        except ImportError as exc:
            raise ConfigError(
                f"--fleet {address}: this torchcanary has no Slurm executor ({exc}); "
                "upgrade torchcanary or use a Ray address (ray://HEAD:10001)"
            ) from None
        executor: Executor = slurm.connect(partition, fleet_dir, slurm_site)
        return executor
    from torchcanary.fleet.ray_connect import connect

    return connect(address) if timeout_s is None else connect(address, timeout_s=timeout_s)
