"""Where Slurm may place a profile's work: any idle node of the profile, never one named.

A unit (or a discovery step) asks for its profile's feature (``--constraint``) and its
GRES, so Slurm picks whichever node of the profile is free: one busy node no longer holds
the work while its twins sit idle. The constraint is the ``tcprofile_NAME`` feature when
every node of the profile has it, else the features they all share (``a&b``); a node of
another profile that would also satisfy it is excluded (``--exclude``), so the work never
lands on other hardware. A profile whose nodes share no feature is placed by excluding
every node that is not of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchcanary.fleet.slurm_cli import SlurmNode

PROFILE_FEATURE = "tcprofile_"


def placement(members: Sequence[SlurmNode], every_node: Sequence[SlurmNode]) -> list[str]:
    """sbatch/srun flags that let Slurm choose any node of ``members`` (one profile) among
    ``every_node`` of the partition, and no other."""
    names = {node.name for node in members}
    shared = set(members[0].features).intersection(*(node.features for node in members[1:]))
    named = sorted(feature for feature in shared if feature.startswith(PROFILE_FEATURE))
    wanted = named[:1] or sorted(shared)
    others = [
        node.name
        for node in every_node
        if node.name not in names and set(wanted) <= set(node.features)
    ]
    flags = [f"--constraint={'&'.join(wanted)}"] if wanted else []
    if others:
        flags.append(f"--exclude={','.join(sorted(others))}")
    return flags


def gres(gpus: int) -> list[str]:
    """The GRES flag for ``gpus`` GPUs (none for a CPU node): Slurm then gives the job
    those devices under its cgroup and sets ``CUDA_VISIBLE_DEVICES`` to them."""
    return [f"--gres=gpu:{gpus}"] if gpus else []
