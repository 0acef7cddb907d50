"""What a Slurm job runs and what it inherits: the one command line and the one
``--export`` list that the executor's unit jobs and the drill's host jobs share."""

from __future__ import annotations

import os
import shlex
import sys

from torchcanary.fleet.secrets import is_secret_name, strip_text

NODE_MODULE = "torchcanary.fleet.slurm_node"
# What a job gets from the driver's environment (the allow-list docs/fleet.md shows): the
# paths and the library path, the locale, the proxies the installers go through, how
# torchcanary and the installers find their cache and index, and how the site tuned its
# fabric (NCCL, UCX and libfabric, which a multi-node collective reads at start up). Never
# a secret-named one.
_EXPORT_NAMES = (
    "PATH", "HOME", "LANG", "LC_ALL", "LD_LIBRARY_PATH",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
)  # fmt: skip
_EXPORT_PREFIXES = ("TORCHCANARY_", "PIP_", "UV_", "NCCL_", "UCX_", "FI_")


def export_list(environ: dict[str, str] | None = None) -> str:
    """``--export``'s value: the names a job takes from the driver; none secret-named, and
    none whose value holds a URL with a password (a proxy as ``http://user:pw@host``):
    sbatch keeps the job's environment in slurmctld's state, where the password would
    outlive the run."""
    names = dict(os.environ if environ is None else environ)
    allowed = [name for name in _EXPORT_NAMES if name in names]
    allowed += sorted(name for name in names if name.startswith(_EXPORT_PREFIXES))
    chosen = [
        name
        for name in allowed
        if not is_secret_name(name) and strip_text(names[name]) == names[name]
    ]
    return ",".join(chosen) or "NONE"


def node_command(*args: str) -> str:
    """The shell line a job runs: this Python (at the same path on every node), on
    ``slurm_node``."""
    return shlex.join([sys.executable, "-m", NODE_MODULE, *args])
