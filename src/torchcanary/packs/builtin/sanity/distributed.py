"""The distributed backends initialise, and CUDA errors surface as Python exceptions.

Each backend is initialised for real in a one-process group over a FileStore and runs
an all-reduce; a backend that needs a GPU is not checkable without one.
"""

from __future__ import annotations

import os
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome


def _one_rank_allreduce(backend: str, device: str, scratch: str) -> float:
    import torch
    import torch.distributed as dist

    store = dist.FileStore(os.path.join(scratch, f"store-{backend}"), 1)
    dist.init_process_group(backend, store=store, rank=0, world_size=1)
    try:
        tensor = torch.full((4,), 3.0, device=device)
        dist.all_reduce(tensor)
        return float(tensor.sum())
    finally:
        dist.destroy_process_group()


def gloo_initialises(ctx: ProbeContext) -> Outcome:
    """Claim: the gloo backend is built in, initialises and all-reduces.

    Decides by ``dist.is_gloo_available()`` and a real one-rank gloo group's all-reduce.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return refuted("torch.distributed or gloo is not built in")
    total = _one_rank_allreduce("gloo", "cpu", ctx.scratch_dir)
    if total != 12.0:
        return refuted(f"gloo all-reduce gave {total}, not 12.0", total=total)
    return confirmed("gloo initialised and all-reduced", total=total)


def nccl_initialises(ctx: ProbeContext) -> Outcome:
    """Claim: where a GPU is present, NCCL (and the in-tree nccl2, when registered) initialise.

    Decides by a real one-rank group per backend on ``cuda:0``; without CUDA it is not
    checkable, and the evidence records whether NCCL is at least compiled in.
    """
    from importlib.metadata import entry_points

    import torch
    import torch.distributed as dist

    backends = ["nccl"] + [
        e.name for e in entry_points(group="torch.distributed.backends") if e.name == "nccl2"
    ]
    evidence: dict[str, Any] = {
        "nccl_built": bool(dist.is_available() and dist.is_nccl_available()),
        "backends": backends,
    }
    if not torch.cuda.is_available():
        return not_checkable("not checked: needs a CUDA GPU", **evidence)
    failures = {}
    for backend in backends:
        try:
            evidence[backend] = _one_rank_allreduce(backend, "cuda", ctx.scratch_dir)
        except Exception as exc:
            failures[backend] = f"{type(exc).__name__}: {str(exc)[:200]}"
    if failures:
        return refuted(
            f"failed to initialise: {', '.join(failures)}", failures=failures, **evidence
        )
    return confirmed(f"{', '.join(backends)} initialised on cuda:0", **evidence)


def cuda_errors_caught(ctx: ProbeContext) -> Outcome:
    """Claim: a CUDA error (out-of-range index) surfaces as a Python exception, not a hang.

    Decides by an out-of-bounds ``index_select`` on ``cuda:0`` under CUDA_LAUNCH_BLOCKING,
    expecting a RuntimeError; without CUDA it is not checkable.
    """
    import torch

    if not torch.cuda.is_available():
        return not_checkable("not checked: needs a CUDA GPU")
    data = torch.zeros(4, device="cuda")
    try:
        torch.index_select(data, 0, torch.tensor([10], device="cuda"))
        torch.cuda.synchronize()
    except RuntimeError as exc:
        return confirmed("the CUDA error surfaced as RuntimeError", error=str(exc)[:300])
    return refuted("an out-of-range CUDA index raised nothing")


PROBES = (
    Probe(
        id="sanity.gloo-init",
        claim="gloo is built in, initialises and all-reduces.",
        scope="CPU",
        run=gloo_initialises,
        timeout_s=120,
    ),
    Probe(
        id="sanity.nccl-init",
        claim="NCCL (and nccl2 where registered) initialise on a GPU.",
        scope="CUDA",
        run=nccl_initialises,
        timeout_s=120,
    ),
    Probe(
        id="sanity.cuda-errors-caught",
        claim="CUDA errors surface as Python exceptions.",
        scope="CUDA",
        run=cuda_errors_caught,
        timeout_s=120,
    ),
)
