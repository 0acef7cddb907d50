"""The drill job: a small real data-parallel training run that faults are injected into.

Worker side (standard library and torch only). Run under torchrun, unchanged on one host or
many::

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        -m torchcanary.worker.drill.builtin_job --steps 40 --ckpt-dir /tmp/ckpt --events-dir /tmp/ev

or, for the in-place recovery paths (where torchrun's restart-everything would hide what is
being tested), as plain processes with RANK/WORLD_SIZE set and ``--store host:port``.

Every path runs the data-parallel mode asked for (``--parallel ddp|fsdp``): the in-place
ones rebuild the group, wrap the model again in that mode and restore the state (see
:class:`Replicas`), so a drill says whether *that* mode recovers in place.

Each process appends JSON events (start, step with its global loss and gradient norm,
checkpoint, error, recovery, done) to its own log in ``--events-dir``; the drill reads them
to inject faults at a step, to measure, and to compare every step with a fault-free run.
On a failed collective the job dumps the Flight Recorder buffer, then either exits for the
elastic agent to restart it from the last checkpoint, or recovers in place.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from torchcanary.worker.drill import recovery
from torchcanary.worker.drill.events import EventLog
from torchcanary.worker.drill.model import (
    SyntheticCorpus,
    build_model,
    eval_loss,
    local_loss,
    param_digest,
    shard_of_step,
)
from torchcanary.worker.drill.replicas import Replicas
from torchcanary.worker.ending import end_now
from torchcanary.worker.numpy_free import route_object_collectives_around_numpy

EXIT_RECOVERY_UNSUPPORTED = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchcanary.worker.drill.builtin_job", description=__doc__
    )
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--events-dir", type=Path, required=True)
    parser.add_argument("--ckpt-dir", type=Path, default=None)
    parser.add_argument("--ckpt-every", type=int, default=5)
    parser.add_argument("--fr-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--global-batch", type=int, default=12)
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
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
        self.model: torch.nn.Module
        self.replicas: Replicas
        self.optimizer: torch.optim.Optimizer

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
    def _build(self) -> None:
        """A fresh model at the seed's step-0 state, not yet wrapped."""
        self.model = build_model(self.args.seed).to(self.device)
        self.replicas = Replicas(self.model, self.args.parallel, self.device)

    def _wrap(self, new_optimizer: bool) -> None:
        """Wrap over the current group; a new optimizer is built after wrapping, because
        FSDP2 swaps the parameters for sharded ones."""
        self.replicas.wrap()
        if new_optimizer:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3)

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
        # Local work first: a replacement joining a running group must not spend its peers'
        # collective timeout building data and a model.
        corpus = SyntheticCorpus(args.seed, args.steps * args.global_batch + 16)
        checkpoints = Checkpointer(args.ckpt_dir, args.ckpt_every)
        self._build()
        try:
            self.join_group()
        except recovery.RecoveryUnsupported as exc:
            self.log.emit("unsupported", path=args.recovery, reason=str(exc))
            return EXIT_RECOVERY_UNSUPPORTED
        step = 0
        resumed = checkpoints.latest_step()
        try:
            if args.join_generation is not None:
                step = self._restore(checkpoints, completed=-1, joining=True)[0] + 1
            else:
                self._wrap(new_optimizer=True)
                if resumed is not None:
                    checkpoints.load(resumed, self.replicas.module, self.optimizer)
                    step = resumed + 1
        except recovery.RecoveryUnsupported as exc:
            self.log.emit("unsupported", path=args.parallel, reason=str(exc))
            return EXIT_RECOVERY_UNSUPPORTED
        self.log.emit(
            "start", step=step, resumed_from=resumed if step else None, world=self.membership.world
        )
        while step < args.steps:
            time.sleep(args.step_pad_s)
            started = time.time()
            failed = False
            try:
                loss, grad_norm = self._train_step(step, corpus)
                self.log.emit(
                    "step",
                    step=step,
                    loss=loss,
                    grad_norm=grad_norm,
                    dt=time.time() - started,
                    world=self.membership.world,
                )
                saved_at = time.time()
                if checkpoints.save(
                    step, self.replicas.module, self.optimizer, self.membership.rank
                ):
                    self.log.emit("ckpt", step=step, dur=time.time() - saved_at)
            except Exception as exc:
                failed = True
                self.log.emit(
                    "error",
                    step=step,
                    kind=classify_error(exc),
                    error=f"{type(exc).__name__}: {exc}"[:600],
                    after_s=time.time() - started,
                )
            # Recovery runs outside the except block, so the failed step's frames (and the
            # old wrapper they hold) are gone before the model is wrapped again.
            if not failed:
                step += 1
                continue
            self.log.emit("fr_dump", **dump_flight_recorder(args.fr_dir, self.rank, self.attempt))
            if args.recovery == "exit":
                return 1
            try:
                step = self._recover(checkpoints, completed=step - 1) + 1
            except recovery.RecoveryUnsupported as exc2:
                self.log.emit(
                    "unsupported",
                    path=args.recovery,
                    reason=f"on {args.backend} with {args.parallel}: {exc2}",
                )
                return EXIT_RECOVERY_UNSUPPORTED
        final = eval_loss(self.replicas.module, corpus)
        digest = param_digest(self.replicas.full_parameters())
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

    def _train_step(self, step: int, corpus: SyntheticCorpus) -> tuple[float, float]:
        """One optimizer step; returns the global loss and the global gradient norm."""
        args = self.args
        member = self.membership
        indices = shard_of_step(step, args.global_batch, member.rank, member.world)
        self.optimizer.zero_grad(set_to_none=True)
        loss = local_loss(self.replicas.module, corpus, indices, args.global_batch, member.world)
        loss.backward()
        grad_norm = self.replicas.grad_norm()
        # The global loss is all-reduced before the update, so a failure anywhere in the
        # step leaves every rank's parameters at the previous step.
        reported = (loss.detach() / member.world).reshape(1)
        dist.all_reduce(reported)
        self.optimizer.step()
        return float(reported.item()), grad_norm

    # in-place recovery ------------------------------------------------------------------
    def _recover(self, checkpoints: Checkpointer, completed: int) -> int:
        """Rebuild the group, then the wrapper and the state; returns the last good step."""
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
        last, restored = self._restore(checkpoints, completed, joining=False)
        self.log.emit(
            "recovered",
            path=self.args.recovery,
            parallel=self.args.parallel,
            restored=restored,
            old_wrapper_freed=self.replicas.old_wrapper_freed,
            dead=dead,
            world=self.membership.world,
            generation=self.membership.generation,
            resume_step=last + 1,
            took_s=time.time() - began,
        )
        return last

    def _restore(self, checkpoints: Checkpointer, completed: int, joining: bool) -> tuple[int, str]:
        """Wrap again on the recovered group and make every rank hold the same state.

        DDP: the most advanced survivor broadcasts its replica. FSDP2: no survivor holds
        the lost shards, so every rank builds the model afresh and loads the last
        checkpoint all agree on (resharded to the new group), or starts over without one.
        Returns the last step that state has completed, and how it was restored. Every
        rank agrees through the store before its first collective, so a replacement still
        starting up never holds the survivors inside a collective's timeout.
        """
        assert self.store is not None
        if self.replicas.state_survives_rank_loss:
            source, last = recovery.agree_on_source(self.store, self.membership, completed)
            self._wrap(new_optimizer=joining)
            self._broadcast_state(source)
            return last, f"DDP wrapped again; state broadcast from rank {source} (step {last})"
        self._build()
        self._wrap(new_optimizer=True)
        import torch.distributed.checkpoint  # noqa: F401 (seconds to import: not inside a timeout)

        latest = checkpoints.latest_step()
        agreed = recovery.agree_on_checkpoint(
            self.store, self.membership, -1 if latest is None else latest
        )
        if agreed < 0:
            return -1, "FSDP2 sharded again; no checkpoint, so training starts over"
        checkpoints.load(agreed, self.replicas.module, self.optimizer)
        return agreed, f"FSDP2 sharded again; state loaded from the checkpoint of step {agreed}"

    def _broadcast_state(self, source: int) -> None:
        """Overwrite parameters and optimizer state everywhere with ``source``'s."""
        for param in self.model.parameters():
            state = self.optimizer.state[param]
            if not state:  # a replacement has no optimizer state yet: shape it, then fill
                state["step"] = torch.zeros(())
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
        tensors = [p.data for p in self.model.parameters()]
        for param in self.model.parameters():
            state = self.optimizer.state[param]
            tensors += [state["step"], state["exp_avg"], state["exp_avg_sq"]]
        recovery.broadcast_state(tensors, source)


def main(argv: list[str] | None = None) -> int:
    # The job runs in the user's environment as it is: its checkpoints must not need numpy.
    route_object_collectives_around_numpy()
    return Job(parse_args(argv)).run()


if __name__ == "__main__":
    # Everything the drill reads is written (events line by line, checkpoints closed). Left to
    # interpreter finalization, a gloo worker thread of FSDP2's cyclic model dropping its
    # last work aborted the rank now and then (SIGABRT after its "done").
    end_now(main())
