"""What a Slurm job runs and what it inherits: the one command line and the one
``--export`` list that the executor's unit jobs and the drill's host jobs share."""

from __future__ import annotations

import os
import shlex
import sys

from torchcanary.fleet.secrets import is_secret_name

NODE_MODULE = "torchcanary.fleet.slurm_node"
# What a job gets from the driver's environment: the paths, the locale, and how
# torchcanary and the installers find their cache and index. Never a secret-named one.
_EXPORT_NAMES = ("PATH", "HOME", "LANG", "LC_ALL")
_EXPORT_PREFIXES = ("TORCHCANARY_", "PIP_", "UV_")


def export_list(environ: dict[str, str] | None = None) -> str:
    """``--export``'s value: the names a job takes from the driver, none secret-named."""
    names = dict(os.environ if environ is None else environ)
    chosen = [name for name in _EXPORT_NAMES if name in names]
    chosen += sorted(
        name for name in names if name.startswith(_EXPORT_PREFIXES) and not is_secret_name(name)
    )
    return ",".join(chosen) or "NONE"


def node_command(*args: str) -> str:
    """The shell line a job runs: this Python (at the same path on every node), on
    ``slurm_node``."""
    return shlex.join([sys.executable, "-m", NODE_MODULE, *args])
