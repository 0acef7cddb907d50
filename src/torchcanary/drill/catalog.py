"""What drills exist: the faults, the recovery paths, and which pairs make sense.

Orchestrator side, standard library only. A drill is named ``fault:recovery``; this module
is the one place that knows the names, so the settings parser, the runner and the report
agree on them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

FAULTS = {
    "kill": "a rank is killed with SIGKILL",
    "kill-in-backward": "a rank is killed with SIGKILL inside its backward pass (DDP: once the "
    "gradient reaches the model's output), its peers left in that step's gradient all-reduce",
    "hang": "a rank is stopped with SIGSTOP, so its peers wait inside a collective",
    "net-down": "a rank's network link is taken down (its own namespace, veth set down)",
    "net-slow": "a rank's link is rate-limited with a tc tbf filter (no netem on this kernel)",
    "store-kill": "the process hosting the rendezvous store is killed",
    "node-kill": "a whole node dies (its drill processes and its Ray node); across nodes only",
}

RECOVERIES = {
    "restart": "torchrun's elastic agent restarts all workers from the last checkpoint",
    "restart-unshared": "as restart, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, so each "
    "rendezvous round gets a fresh store for the workers",
    "shrink": "survivors call torch.distributed.shrink_group and go on with fewer ranks, "
    "the model wrapped again in the job's mode (DDP or FSDP2)",
    "reconfigure": "survivors and a replacement rank rebuild the group in place "
    "(init_process_group(enable_reconfigure=True), _reconfigure), then wrap the model again "
    "in the job's mode: DDP takes a survivor's replica, FSDP2 the last checkpoint",
    "replace": "a fresh node takes the dead node's place: the survivors' elastic agents "
    "admit it and every rank restarts from the last checkpoint on N nodes again",
    "timeout": "no recovery: does the fault surface as an error, and after how long",
    "none": "no recovery: the job is left to run on through the fault",
}

VALID = {
    "kill": ("restart", "restart-unshared", "shrink", "reconfigure", "timeout"),
    "kill-in-backward": ("restart", "restart-unshared", "shrink", "reconfigure", "timeout"),
    "hang": ("timeout", "restart", "restart-unshared"),
    "net-down": ("timeout", "restart-unshared"),
    "net-slow": ("none",),
    "store-kill": ("restart", "restart-unshared"),
    "node-kill": ("timeout", "restart", "restart-unshared", "replace"),
}

DEFAULT_RECOVERY = {
    "kill": "restart",
    "kill-in-backward": "reconfigure",
    "hang": "timeout",
    "net-down": "timeout",
    "net-slow": "none",
    "store-kill": "restart",
    "node-kill": "timeout",
}

# The default avoids torchrun's shared rendezvous store, whose restarts fail about half the
# time on gloo in both versions (pytorch/pytorch#135712); "all" includes the plain restart.
DEFAULT_DRILLS = ("kill:restart-unshared", "kill:reconfigure", "hang:timeout")
ACROSS_NODES_ONLY = ("node-kill",)  # drill --fleet ADDR --nodes N (drill/node_drill.py)
# Struck inside a step (job_backward.py arms the rank): a user's DDP job, not the built-in one.
USER_JOB_ONLY = ("kill-in-backward",)
FULL_DRILLS = tuple(
    f"{fault}:{recovery}"
    for fault, recoveries in VALID.items()
    if fault not in (*ACROSS_NODES_ONLY, *USER_JOB_ONLY)
    for recovery in recoveries
)

NETWORK_FAULTS = ("net-down", "net-slow")
RESTARTS = ("restart", "restart-unshared")
# Recoveries whose rendezvous rounds each get a fresh store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE).
UNSHARED_STORE = ("restart-unshared", "replace")


def parse_drill_name(name: str) -> tuple[str, str]:
    """``fault`` or ``fault:recovery`` -> (fault, recovery); ValueError names the fix."""
    fault, _, recovery = str(name).partition(":")
    if fault not in FAULTS:
        raise ValueError(
            f"unknown fault {fault!r} in drill {name!r}: use one of {', '.join(FAULTS)}"
        )
    recovery = recovery or DEFAULT_RECOVERY[fault]
    if recovery not in VALID[fault]:
        raise ValueError(
            f"drill {name!r}: fault {fault!r} cannot be paired with recovery "
            f"{recovery!r}; valid: {', '.join(f'{fault}:{r}' for r in VALID[fault])}"
        )
    return fault, recovery


@dataclass(frozen=True)
class DrillSpec:
    """One drill as it will run: the fault, the path, and the job it is injected into."""

    fault: str
    recovery: str
    ranks: int = 2
    steps: int = 30
    at_step: int = 12
    target_rank: int = 1
    timeout_s: float = 10.0
    ckpt_every: int = 5
    parallel: str = "ddp"  # the user's mode, run by every path (in place too)
    step_pad_s: float = 0.05
    net_rate: str = "20mbit"
    drill_timeout_s: float = 180.0
    seed: int = 0

    @property
    def key(self) -> str:
        return f"{self.fault}:{self.recovery}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
