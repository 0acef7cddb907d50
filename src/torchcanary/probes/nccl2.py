"""The in-tree ``nccl2`` backend: registered in c10d, no torchcomms install, full contract.

Registration is checkable without a GPU: ``init_process_group("nccl2")`` on one rank
either resolves the name to a backend object or fails, and that is what a user meets
first. The collective contract, nonblocking communicators and eager splitting need NCCL
on real CUDA devices; those probes state so where there are none, and otherwise run the
collectives on up to two GPUs against values computed by hand.
"""

from __future__ import annotations

import importlib.util
import signal
from typing import Any

from torchcanary.probe import (
    Needs,
    Probe,
    ProbeContext,
    absent,
    confirmed,
    not_checkable,
    refuted,
)
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import raised, run_on_ranks
from torchcanary.worker.multirank import RanksFailed, run_ranks

_NO_NCCL = "doesn't have NCCL built in"


def _teardown_failure(returncode: int | None, stderr_tail: str) -> str:
    """How the rank died after answering: its signal, and the C++ ``what()`` if kept."""
    how = f"exit status {returncode}"
    if returncode is not None and returncode < 0:
        how = f"killed by {signal.Signals(-returncode).name}"
    what = [line.strip() for line in stderr_tail.splitlines() if "what():" in line]
    return f"{how} while tearing the group down" + (f" ({what[-1][:200]})" if what else "")


def registration_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side (a 1-rank group started with backend ``nccl2``): what did the name build?"""
    import torch
    import torch.distributed as dist

    report: dict[str, Any] = {
        "backend": dist.get_backend(),
        "backend_config": dist.get_backend_config(),
    }
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cuda"))
        report["backend_class"] = type(backend).__name__
    except Exception as exc:
        report["backend_class_error"] = f"{type(exc).__name__}: {exc}"[:300]
    plugin = dist.Backend._plugins.get("NCCL2")
    creator = getattr(plugin, "creator_fn", None)
    report["creator_module"] = getattr(creator, "__module__", None)
    return report


def run_registration(context: ProbeContext) -> Outcome:
    """Claim: ``nccl2`` is a c10d backend name that works without installing torchcomms.

    Decides by starting a real 1-rank group with ``init_process_group("nccl2")`` in a
    fresh process: confirmed when the group comes up with an ``nccl2`` backend built by
    torch's own code (and torchcomms is not what provided it).
    """
    import torch.distributed as dist

    torchcomms_installed = importlib.util.find_spec("torchcomms") is not None
    evidence: dict[str, Any] = {
        "torchcomms_installed": torchcomms_installed,
        "is_backend_available": bool(dist.is_available() and dist.is_backend_available("nccl2")),
    }
    try:
        values = run_ranks(f"{__name__}:registration_on_rank", 1, backend="nccl2", timeout_s=60)
    except RanksFailed as failure:
        rank0 = failure.ranks[0]
        if rank0["value"] is None:
            text = f"{failure}: {rank0['stderr_tail'][-1200:]}"
            if _NO_NCCL in text:
                return not_checkable(
                    "not checked: this build has no NCCL, so nccl2 cannot be created",
                    failure=text,
                    **evidence,
                )
            return absent(
                "init_process_group('nccl2') fails: the name is not a registered backend",
                failure=text,
                **evidence,
            )
        # The group came up and answered; only its teardown failed. That is a finding
        # about the build (shown as evidence), not about registration.
        values = [rank0["value"]["value"]]
        evidence["teardown_failure"] = _teardown_failure(rank0["returncode"], rank0["stderr_tail"])
    report = values[0]
    evidence.update(report)
    from_torch = str(report.get("creator_module") or "").startswith("torch.")
    if report["backend"] != "nccl2" or not from_torch:
        return refuted("the nccl2 name did not resolve to torch's own backend", **evidence)
    return confirmed(
        "init_process_group('nccl2') built "
        f"{report.get('backend_class', 'a backend')} from torch itself"
        + ("" if torchcomms_installed else " with no torchcomms installed"),
        **evidence,
    )


def contract_on_cuda_rank(rank: int, world_size: int, blocking: bool) -> dict[str, Any]:
    """Rank side on CUDA: an nccl2 group runs every collective of the contract correctly.

    ``blocking=False`` builds the communicator nonblocking and eagerly (device_id given),
    issues async collectives, then splits the group eagerly and uses the split.
    """
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    options = dist.ProcessGroupNCCL.Options()
    if not blocking:
        options.config.blocking = 0
    group = dist.new_group(
        list(range(world_size)), backend="nccl2", pg_options=options, device_id=device
    )
    checks: dict[str, bool] = {}
    base = torch.arange(4, device=device, dtype=torch.float32)

    value = base + rank
    work = dist.all_reduce(value, group=group, async_op=not blocking)
    if work is not None:
        work.wait()
    checks["all_reduce"] = value.tolist() == (base * world_size + sum(range(world_size))).tolist()

    value = base + rank
    dist.broadcast(value, src=0, group=group)
    checks["broadcast"] = value.tolist() == base.tolist()

    gathered = torch.empty(4 * world_size, device=device)
    dist.all_gather_into_tensor(gathered, base + rank, group=group)
    checks["all_gather"] = (
        gathered.tolist() == torch.cat([base + r for r in range(world_size)]).tolist()
    )

    scattered = torch.empty(4, device=device)
    dist.reduce_scatter_tensor(scattered, torch.cat([base] * world_size), group=group)
    checks["reduce_scatter"] = scattered.tolist() == (base * world_size).tolist()

    exchanged = torch.empty(world_size, device=device)
    dist.all_to_all_single(
        exchanged, torch.full((world_size,), float(rank), device=device), group=group
    )
    checks["all_to_all"] = exchanged.tolist() == [float(r) for r in range(world_size)]
    dist.barrier(group=group)
    torch.cuda.synchronize()

    report: dict[str, Any] = {
        "checks": checks,
        "backend_class": type(group._get_backend(device)).__name__,
    }
    if not blocking:
        split = dist.split_group(group, [list(range(world_size))])
        value = torch.ones(2, device=device)
        dist.all_reduce(value, group=split)
        torch.cuda.synchronize()
        checks["all_reduce_on_eager_split"] = value.tolist() == [float(world_size)] * 2
        report["split_backend_class"] = type(split._get_backend(device)).__name__
    return report


def _cuda_contract(blocking: bool, what: str) -> Outcome:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return not_checkable(f"not checked: {what} needs CUDA GPUs with NCCL")
    if not (dist.is_available() and dist.is_backend_available("nccl2")):
        return absent("nccl2 is not an available backend in this build")
    world_size = min(2, torch.cuda.device_count())
    values, failure = run_on_ranks(
        f"{__name__}:contract_on_cuda_rank", world_size, {"blocking": blocking}, timeout_s=180
    )
    if values is None:
        return refuted(f"nccl2 ranks failed during {what}", failure=failure)
    if raised(values):
        return refuted(f"nccl2 raised during {what}: {raised(values)[0]}", ranks=values)
    failed = sorted({name for v in values for name, ok in v["checks"].items() if not ok})
    if failed:
        return refuted(f"nccl2 gave wrong results for {', '.join(failed)}", ranks=values)
    return confirmed(
        f"{what}: every check passed on {world_size} GPU rank(s)",
        ranks=values,
        world_size=world_size,
    )


def run_contract(context: ProbeContext) -> Outcome:
    """Claim: nccl2 carries the full collective contract (all_reduce, broadcast, all_gather,
    reduce_scatter, all_to_all, barrier).

    Decides on up to 2 CUDA ranks: each collective's output must equal the value worked
    out by hand from the rank ids.
    """
    return _cuda_contract(True, "the nccl2 collective contract")


def run_nonblocking_split(context: ProbeContext) -> Outcome:
    """Claim: nccl2 communicators can be nonblocking and split eagerly.

    Decides on up to 2 CUDA ranks: a group built with ``config.blocking = 0`` and a
    ``device_id`` (eager init) runs async collectives correctly, and ``split_group`` of it
    yields a working nccl2 group.
    """
    return _cuda_contract(False, "nonblocking nccl2 with eager splitting")


PROBES = (
    Probe(
        id="nccl2.registered-in-tree",
        claim="'nccl2' is a c10d backend that init_process_group accepts without a "
        "separate torchcomms install.",
        release_claim="nccl2 in-tree: ... no separate torchcomms install for the new backend",
        scope="any (registration); cuda for collectives",
        run=run_registration,
        timeout_s=90,
    ),
    Probe(
        id="nccl2.collective-contract",
        claim="The nccl2 backend runs every standard collective with correct results.",
        release_claim="nccl2 in-tree: Ported from torchcomms with the full collective contract",
        scope="cuda",
        run=run_contract,
        needs=Needs(devices=("cuda",), ranks=2),
        timeout_s=240,
    ),
    Probe(
        id="nccl2.nonblocking-eager-split",
        claim="nccl2 communicators can be nonblocking and eagerly initialised, and split "
        "into working sub-groups.",
        release_claim="nccl2 in-tree: ... nonblocking communicators, and eager communicator "
        "splitting",
        scope="cuda",
        run=run_nonblocking_split,
        needs=Needs(devices=("cuda",), ranks=2),
        timeout_s=240,
    ),
)
