"""The drill job's data-parallel wrapper: the user's mode, DDP or FSDP2, on every path.

Worker side (standard library and torch only). Kept apart from the job so what the drill
runs (and how it is wrapped again after an in-place recovery) is one short file to read.
"""

from __future__ import annotations

import gc
import weakref

import torch
import torch.distributed as dist

from torchcanary.worker.drill.recovery import RecoveryUnsupported


class Replicas:
    """The user's data-parallel wrapper: DDP or FSDP2 (``fully_shard``), and nothing else.

    The drill must test the mode the user runs, in place too: an in-place recovery drops
    the old wrapper and wraps again on the recovered group (a DDP reducer caught
    mid-backward by a failed collective is not reused). DDP keeps a whole replica on every
    rank, so survivors can hand the state on; FSDP2 keeps one copy of each shard, so a lost
    rank's shard exists only in the last checkpoint.
    """

    def __init__(self, model: torch.nn.Module, mode: str, device: torch.device) -> None:
        self.model = model
        self.mode = mode
        self.device = device
        self.module: torch.nn.Module = model
        self.old_wrapper_freed: bool | None = None

    @property
    def state_survives_rank_loss(self) -> bool:
        return self.mode == "ddp"

    def wrap(self) -> None:
        """Wrap the model over the current default group (again, after a recovery)."""
        if self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            old = weakref.ref(self.module) if self.module is not self.model else None
            self.module = self.model
            gc.collect()  # the old reducer's gradient hooks go with it
            # A reducer still alive would go on reducing every backward: say if one is.
            self.old_wrapper_freed = None if old is None else old() is None
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.module = DistributedDataParallel(self.model, device_ids=ids)
            return
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError as exc:
            raise RecoveryUnsupported(f"no FSDP2 fully_shard: {exc}") from exc
        for block in self.model.blocks:  # type: ignore[attr-defined]
            fully_shard(block)
        fully_shard(self.model)
        self.module = self.model

    def grad_norm(self) -> float:
        """The global gradient norm after the exchange (FSDP2 shards are summed over ranks)."""
        squares = torch.zeros((), dtype=torch.float64)
        for param in self.model.parameters():
            grad = param.grad
            if grad is None:
                continue
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            squares += local.detach().double().pow(2).sum().cpu()
        if self.mode == "fsdp":
            squares = squares.to(self.device)
            dist.all_reduce(squares)
        return float(squares.sqrt().item())

    def full_parameters(self) -> list[torch.Tensor]:
        """Whole parameter tensors in a fixed order (FSDP shards are gathered)."""
        params = []
        for param in self.model.parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            params.append(full.detach())
        return params
