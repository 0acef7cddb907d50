"""The drill job: a small real data-parallel training run that faults are injected into.

Worker side (standard library and torch only). Run under torchrun, unchanged on one host or
many::

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m torchcanary.drills.job --steps 40 --ckpt-dir /tmp/ckpt --events-dir /tmp/ev

or, for the in-place recovery paths (where torchrun's restart-everything would hide what is
being tested), as plain processes with RANK/WORLD_SIZE set and ``--store host:port``.

Each process appends JSON events (start, step, checkpoint, error, recovery, done) to its own
log in ``--events-dir``; the drill reads them to inject faults at a step and to measure.
On a failed collective the job dumps the Flight Recorder buffer, then either exits for the
elastic agent to restart it from the last checkpoint, or recovers in place.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from torchcanary.drills import recovery
from torchcanary.drills.events import EventLog
from torchcanary.drills.model import (
    SyntheticCorpus,
    build_model,
    eval_loss,
    local_loss,
    param_digest,
    shard_of_step,
)

EXIT_RECOVERY_UNSUPPORTED = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="torchcanary.drills.job", description=__doc__)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--events-dir", type=Path, required=True)
    parser.add_argument("--ckpt-dir", type=Path, default=None)
    parser.add_argument("--ckpt-every", type=int, default=5)
    parser.add_argument("--fr-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--global-batch", type=int, default=12)
    parser.add_argument("--parallel", choices=("ddp", "fsdp", "allreduce"), default="ddp")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument(
        "--step-pad-s",
        type=float,
        default=0.05,
        help="sleep before each step, standing in for data loading, so a "
        "fault lands at the step the drill chose",
    )
    parser.add_argument(
        "--recovery",
        choices=("exit", "shrink", "reconfigure"),
        default="exit",
        help="on a failed collective: exit non-zero (under "
        "torchrun the elastic agent then restarts the job from the last "
        "checkpoint), or recover in place",
    )
    parser.add_argument(
        "--store", default=None, help="host:port of the drill's store (in-place recovery only)"
    )
    parser.add_argument(
        "--join-generation",
        type=int,
        default=None,
        help="join a running group as a replacement at this generation",
    )
    parser.add_argument("--heartbeat-window-s", type=float, default=1.5)
    return parser.parse_args(argv)


class Replicas:
    """How the gradient is combined: DDP, FSDP2 (fully_shard), or an explicit all-reduce.

    The in-place paths use the explicit all-reduce: a DDP reducer caught mid-backward by a
    failed collective cannot be trusted afterwards, so torchft-style recovery owns the
    gradient exchange itself.
    """

    def __init__(self, model: torch.nn.Module, mode: str, device: torch.device) -> None:
        self.model = model
        self.mode = mode
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            self.module: torch.nn.Module = DistributedDataParallel(model, device_ids=ids)
        elif mode == "fsdp":
            try:
                from torch.distributed.fsdp import fully_shard
            except ImportError as exc:
                raise recovery.RecoveryUnsupported(f"no FSDP2 fully_shard: {exc}") from exc
            for block in model.blocks:  # type: ignore[attr-defined]
                fully_shard(block)
            fully_shard(model)
            self.module = model
        else:
            self.module = model

    def sync_gradients(self) -> None:
        if self.mode != "allreduce":
            return  # DDP and FSDP reduce inside backward
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def full_parameters(self) -> list[torch.Tensor]:
        """Whole parameter tensors in a fixed order (FSDP shards are gathered)."""
        params = []
        for param in self.model.parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            params.append(full.detach())
        return params


class Checkpointer:
    """Model and optimizer state saved with torch.distributed.checkpoint every N steps.

    ``latest`` is written by rank 0 after a save completes everywhere, so a restart never
    resumes from a checkpoint that only some ranks finished.
    """

    def __init__(self, directory: Path | None, every: int) -> None:
        self.directory = directory
        self.every = every

    def latest_step(self) -> int | None:
        if self.directory is None or not (self.directory / "latest").exists():
            return None
        return int((self.directory / "latest").read_text().strip())

    def save(
        self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int
    ) -> bool:
        if self.directory is None or self.every <= 0 or (step + 1) % self.every:
            return False
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save(
            {"model": model_state, "optim": optim_state},
            checkpoint_id=str(self.directory / f"step_{step}"),
        )
        dist.barrier()
        if rank == 0:
            marker = self.directory / "latest.tmp"
            marker.write_text(str(step))
            marker.replace(self.directory / "latest")
        return True

    def load(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        assert self.directory is not None
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(self.directory / f"step_{step}"))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )


def dump_flight_recorder(fr_dir: Path | None, rank: int, attempt: int) -> dict[str, Any]:
    """Write this rank's Flight Recorder buffer where torch's fr_trace analyser reads it.

    Two files: torch's own pickle format (``rank_<R>``, read only by torch's analyser in
    this environment) and the JSON form that torchcanary itself reads.
    """
    if fr_dir is None:
        return {"dumped": False, "reason": "no --fr-dir"}
    c10d = torch._C._distributed_c10d
    if not hasattr(c10d, "_dump_fr_trace_json"):
        return {"dumped": False, "reason": "this torch has no _dump_fr_trace_json"}
    try:
        raw = c10d._dump_fr_trace(True, False, False)
        as_json = c10d._dump_fr_trace_json(True, False)
    except Exception as exc:
        return {"dumped": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    pickles = fr_dir / f"attempt{attempt}" / "pickle"
    jsons = fr_dir / f"attempt{attempt}" / "json"
    pickles.mkdir(parents=True, exist_ok=True)
    jsons.mkdir(parents=True, exist_ok=True)
    (pickles / f"rank_{rank}").write_bytes(raw)
    (jsons / f"rank_{rank}.json").write_bytes(as_json)
    return {"dumped": True, "bytes": len(as_json)}


def classify_error(exc: BaseException) -> str:
    text = str(exc).lower()
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(
        word in text
        for word in (
            "reset by peer",
            "closed by peer",
            "connection refused",
            "broken pipe",
            "connection closed",
        )
    ):
        return "peer-lost"
    return "other"


class Job:
    """One rank of the training run, from joining the group to the final digest."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        name = f"rank{self.rank}"
        if args.join_generation is not None:
            name += f"-join{args.join_generation}"
        self.log = EventLog(
            args.events_dir / f"{name}.attempt{self.attempt}.jsonl", self.rank, self.attempt
        )
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = (
            torch.device("cuda", local_rank) if args.backend == "nccl" else torch.device("cpu")
        )
        self.store: dist.Store | None = None
        self.membership = recovery.Membership(self.rank, self.world, args.join_generation or 0)
        self.heartbeat: recovery.Heartbeat | None = None

    # group ------------------------------------------------------------------------------
    def join_group(self) -> None:
        args = self.args
        timeout = datetime.timedelta(seconds=args.timeout_s)
        if args.store is None:
            dist.init_process_group(args.backend, timeout=timeout)
            return
        host, _, port = args.store.rpartition(":")
        self.store = dist.TCPStore(
            host, int(port), is_master=False, timeout=datetime.timedelta(seconds=60)
        )
        self.heartbeat = recovery.Heartbeat(host, int(port), self.rank)
        if args.recovery == "reconfigure":
            recovery.init_reconfigurable(
                args.backend,
                self.store,
                self.rank,
                self.world,
                args.timeout_s,
                self.membership.generation,
            )
        else:
            dist.init_process_group(
                args.backend,
                store=dist.PrefixStore("pg", self.store),
                rank=self.rank,
                world_size=self.world,
                timeout=timeout,
            )

    # the run ----------------------------------------------------------------------------
    def run(self) -> int:
        args = self.args
        torch.set_num_threads(1)
        self.log.emit(
            "launch",
            world=self.world,
            torch=torch.__version__,
            recovery=args.recovery,
            parallel=args.parallel,
            joining=args.join_generation,
            node=os.environ.get("TORCHCANARY_NODE"),
        )
        try:
            self.join_group()
        except recovery.RecoveryUnsupported as exc:
            self.log.emit("unsupported", path=args.recovery, reason=str(exc))
            return EXIT_RECOVERY_UNSUPPORTED
        corpus = SyntheticCorpus(args.seed, args.steps * args.global_batch + 16)
        model = build_model(args.seed).to(self.device)
        try:
            replicas = Replicas(model, args.parallel, self.device)
        except recovery.RecoveryUnsupported as exc:
            self.log.emit("unsupported", path=args.parallel, reason=str(exc))
            return EXIT_RECOVERY_UNSUPPORTED
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        checkpoints = Checkpointer(args.ckpt_dir, args.ckpt_every)
        step = 0
        resumed = checkpoints.latest_step()
        if args.join_generation is not None:
            step = self._receive_state(model, optimizer, completed=-1) + 1
        elif resumed is not None:
            checkpoints.load(resumed, replicas.module, optimizer)
            step = resumed + 1
        self.log.emit(
            "start", step=step, resumed_from=resumed if step else None, world=self.membership.world
        )
        while step < args.steps:
            time.sleep(args.step_pad_s)
            started = time.time()
            try:
                loss = self._train_step(step, replicas, optimizer, corpus)
                self.log.emit(
                    "step",
                    step=step,
                    loss=loss,
                    dt=time.time() - started,
                    world=self.membership.world,
                )
                saved_at = time.time()
                if checkpoints.save(step, replicas.module, optimizer, self.membership.rank):
                    self.log.emit("ckpt", step=step, dur=time.time() - saved_at)
            except recovery.RecoveryUnsupported:
                raise
            except Exception as exc:
                self.log.emit(
                    "error",
                    step=step,
                    kind=classify_error(exc),
                    error=f"{type(exc).__name__}: {exc}"[:600],
                    after_s=time.time() - started,
                )
                self.log.emit(
                    "fr_dump", **dump_flight_recorder(args.fr_dir, self.rank, self.attempt)
                )
                if args.recovery == "exit":
                    return 1
                try:
                    step = self._recover(model, optimizer, completed=step - 1) + 1
                except recovery.RecoveryUnsupported as exc2:
                    self.log.emit(
                        "unsupported", path=args.recovery, reason=f"on {args.backend}: {exc2}"
                    )
                    return EXIT_RECOVERY_UNSUPPORTED
                continue
            step += 1
        final = eval_loss(replicas.module, corpus)
        digest = param_digest(replicas.full_parameters())
        self.log.emit(
            "done",
            final_loss=final,
            digest=digest,
            world=self.membership.world,
            rank_now=self.membership.rank,
        )
        if self.heartbeat is not None:
            self.heartbeat.stop()
        # A group broken by the drill is the drill's finding, recorded above.
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        return 0

    def _train_step(
        self,
        step: int,
        replicas: Replicas,
        optimizer: torch.optim.Optimizer,
        corpus: SyntheticCorpus,
    ) -> float:
        args = self.args
        member = self.membership
        indices = shard_of_step(step, args.global_batch, member.rank, member.world)
        optimizer.zero_grad(set_to_none=True)
        loss = local_loss(replicas.module, corpus, indices, args.global_batch, member.world)
        loss.backward()
        replicas.sync_gradients()
        # The global loss is all-reduced before the update, so a failure anywhere in the
        # step leaves every rank's parameters at the previous step.
        reported = (loss.detach() / member.world).reshape(1)
        dist.all_reduce(reported)
        optimizer.step()
        return float(reported.item())

    # in-place recovery ------------------------------------------------------------------
    def _recover(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, completed: int
    ) -> int:
        assert self.store is not None
        began = time.time()

        def announce(dead: list[int], generation: int) -> None:
            self.log.emit("recovering", dead=dead, generation=generation, path=self.args.recovery)

        self.membership, dead = recovery.recover_in_place(
            self.args.recovery,
            self.store,
            self.membership,
            self.args.timeout_s,
            self.args.heartbeat_window_s,
            announce,
        )
        last = self._receive_state(model, optimizer, completed)
        self.log.emit(
            "recovered",
            path=self.args.recovery,
            dead=dead,
            world=self.membership.world,
            generation=self.membership.generation,
            resume_step=last + 1,
            took_s=time.time() - began,
        )
        return last

    def _receive_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, completed: int
    ) -> int:
        """Make every rank hold the most advanced survivor's state; its step is returned."""
        assert self.store is not None
        source, last = recovery.agree_on_source(self.store, self.membership, completed)
        for param in model.parameters():
            state = optimizer.state[param]
            if not state:  # a replacement has no optimizer state yet: shape it, then fill
                state["step"] = torch.zeros(())
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
        tensors = [p.data for p in model.parameters()]
        for param in model.parameters():
            state = optimizer.state[param]
            tensors += [state["step"], state["exp_avg"], state["exp_avg_sq"]]
        recovery.broadcast_state(tensors, source)
        return last


def main(argv: list[str] | None = None) -> int:
    return Job(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
