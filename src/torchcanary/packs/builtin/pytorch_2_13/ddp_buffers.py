"""DistributedDataParallel's buffer flags as changed in 2.13.

``broadcast_buffers`` is deprecated in favour of ``forward_sync_buffers``, and the new flag
no longer decides whether buffers are synced when DDP is built: they always are. Both are
checked on live gloo groups; the second on two real rank processes whose buffers start
different, so only a real broadcast can make them equal.
"""

from __future__ import annotations

import inspect
import os
import warnings
from typing import Any

from torchcanary.probe import Needs, Probe, ProbeContext, absent, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import raised, run_on_ranks


def _has_forward_sync_buffers() -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters


def broadcast_buffers_deprecated(ctx: ProbeContext) -> Outcome:
    """Claim: passing ``broadcast_buffers`` to DDP warns that it is deprecated in favour of
    ``forward_sync_buffers``, and still works.

    Decides by building DDP over a one-rank gloo group with ``broadcast_buffers=False`` and
    recording the warnings: a FutureWarning or DeprecationWarning naming
    ``forward_sync_buffers`` confirms; no such warning refutes.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_available() or not dist.is_gloo_available():
        return not_checkable("not checked: this build has no gloo")
    if not _has_forward_sync_buffers():
        return absent("DistributedDataParallel takes no forward_sync_buffers argument")
    store = dist.FileStore(os.path.join(ctx.scratch_dir, "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = DistributedDataParallel(torch.nn.BatchNorm1d(4), broadcast_buffers=False)
            model(torch.randn(3, 4))
    finally:
        dist.destroy_process_group()
    notices = [
        f"{w.category.__name__}: {str(w.message)[:200]}"
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning))
        and "forward_sync_buffers" in str(w.message)
    ]
    if not notices:
        return refuted("broadcast_buffers was accepted without a deprecation warning")
    return confirmed(
        "broadcast_buffers warns and points to forward_sync_buffers", warning=notices[0]
    )


def buffers_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side: buffers start at the rank's own number; what does each DDP build leave?"""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    def built_with(**flags: Any) -> float:
        module = torch.nn.BatchNorm1d(4)
        module.running_mean.fill_(float(rank + 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            DistributedDataParallel(module, **flags)
        return float(module.running_mean[0])

    return {
        "forward_sync_false": built_with(forward_sync_buffers=False),
        "broadcast_false": built_with(broadcast_buffers=False),
    }


def init_sync_regardless_of_flag(ctx: ProbeContext) -> Outcome:
    """Claim: with ``forward_sync_buffers=False``, buffers are still synced when DDP is built.

    Decides on two gloo ranks whose BatchNorm running means start at 1.0 and 2.0: after
    building DDP with ``forward_sync_buffers=False`` both must hold rank 0's 1.0. As a
    control, ``broadcast_buffers=False`` must leave rank 1 at 2.0 (no sync at init), which
    shows the check can tell the two apart.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return not_checkable("not checked: this build has no gloo")
    if not _has_forward_sync_buffers():
        return absent("DistributedDataParallel takes no forward_sync_buffers argument")
    values, failure = run_on_ranks(f"{__name__}:buffers_on_rank", 2, timeout_s=90)
    if values is None:
        return refuted("the two-rank DDP run did not complete", failure=failure)
    if raised(values):
        return refuted(f"building DDP raised: {raised(values)[0]}", ranks=values)
    synced = [v["forward_sync_false"] for v in values]
    control = [v["broadcast_false"] for v in values]
    evidence = {"forward_sync_false": synced, "broadcast_false": control}
    if control != [1.0, 2.0]:
        return refuted(f"control broke: broadcast_buffers=False left {control}", **evidence)
    if synced != [1.0, 1.0]:
        return refuted(f"forward_sync_buffers=False left buffers {synced} after init", **evidence)
    return confirmed("buffers synced at init with forward_sync_buffers=False", **evidence)


PROBES = (
    Probe(
        id="ddp.broadcast-buffers-deprecated",
        claim="DDP's broadcast_buffers warns it is deprecated for forward_sync_buffers.",
        scope="CPU (gloo)",
        run=broadcast_buffers_deprecated,
        timeout_s=120,
        release_claim="broadcast_buffers is deprecated as of 2.13; "
        "use forward_sync_buffers instead",
    ),
    Probe(
        id="ddp.forward-sync-keeps-init-sync",
        claim="forward_sync_buffers=False still syncs buffers when DDP is built.",
        scope="CPU (gloo, 2 ranks)",
        run=init_sync_regardless_of_flag,
        needs=Needs(ranks=2),
        timeout_s=180,
        release_claim="buffers are always synced at init regardless of this flag",
    ),
)
