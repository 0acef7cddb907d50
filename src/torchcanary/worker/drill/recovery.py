"""In-place recovery for the drill job: survivors agree who died, then shrink or reconfigure.

Worker side (standard library and torch only), used by
:mod:`torchcanary.worker.drill.builtin_job` when it runs outside torchrun with
``--recovery shrink`` or ``--recovery reconfigure``.

Who died is decided by heartbeats, not by the error text: every rank bumps a counter in the
shared store from a background thread (which keeps running while the main thread waits
inside a collective), so a rank whose counter stops moving is killed or stopped. The first
survivor to decide writes the verdict with compare-and-set and everyone adopts it, so all
survivors act on the same membership.

The two paths differ in what the version offers:
- ``shrink``: ``torch.distributed.shrink_group`` drops the dead ranks and training goes on
  with fewer; backends that cannot shrink raise TypeError, reported as absent there.
- ``reconfigure``: the 2.14 interface (``init_process_group(enable_reconfigure=True)``,
  ``_get_reconfigure_handle``, ``_reconfigure``) rebuilds the same group from handles; a
  replacement process started by the drill takes the dead rank's place.

After either, the job wraps its model again in the user's mode on the recovered group and
restores the state: by broadcast from the most advanced survivor under DDP (every rank holds
a whole replica), from the last checkpoint under FSDP2 (the lost rank's shards exist
nowhere else).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

HEARTBEAT_PERIOD_S = 0.25


class RecoveryUnsupported(RuntimeError):
    """This version or backend has no such recovery path; the message says what was tried."""


@dataclass(frozen=True)
class Membership:
    rank: int
    world: int
    generation: int


class Heartbeat:
    """Bumps ``hb/<rank>`` in the store until stopped; its own store client, so it never
    contends with the main thread's (a TCPStore client is not safe across threads)."""

    def __init__(self, host: str, port: int, rank: int) -> None:
        self._store = dist.TCPStore(
            host, port, is_master=False, timeout=datetime.timedelta(seconds=30)
        )
        self._key = f"hb/{rank}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_PERIOD_S):
            try:
                self._store.add(self._key, 1)
            except Exception:
                return  # the store is gone; the drill that killed it reads the job's errors

    def stop(self) -> None:
        self._stop.set()


def _beats(store: dist.Store, world: int) -> list[int]:
    return [int(store.add(f"hb/{rank}", 0)) for rank in range(world)]


def agree_on_dead(store: dist.Store, generation: int, world: int, window_s: float) -> list[int]:
    """The ranks whose heartbeat did not move over ``window_s``, as agreed by all survivors."""
    key = f"dead/{generation}"
    if not store.check([key]):
        before = _beats(store, world)
        time.sleep(window_s)
        after = _beats(store, world)
        dead = [rank for rank in range(world) if after[rank] == before[rank]]
        # compare_set keeps the first survivor's verdict; later ones read it back.
        store.compare_set(key, "", json.dumps(dead))
    return [int(rank) for rank in json.loads(store.get(key))]


def reconfigure_supported() -> str | None:
    """None when this torch has the reconfigure interface, else why not (for 'absent')."""
    missing = [
        name
        for name in ("_reconfigure", "_get_reconfigure_handle", "_supports_reconfigure")
        if not hasattr(dist, name)
    ]
    if missing:
        return f"torch.distributed has no {', '.join(missing)}"
    import inspect

    if "enable_reconfigure" not in inspect.signature(dist.init_process_group).parameters:
        return "init_process_group takes no enable_reconfigure argument"
    return None


def init_reconfigurable(
    backend: str, store: dist.Store, rank: int, world: int, timeout_s: float, generation: int
) -> None:
    """Join (or, for a replacement, rejoin) a reconfigurable group at ``generation``."""
    why_not = reconfigure_supported()
    if why_not:
        raise RecoveryUnsupported(why_not)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore("pg", store),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
        enable_reconfigure=True,
    )
    if not dist._supports_reconfigure():
        raise RecoveryUnsupported(f"{backend} group reports supports_reconfigure=False")
    _exchange_and_reconfigure(store, rank, world, generation, timeout_s)


def _exchange_and_reconfigure(
    store: dist.Store, rank: int, world: int, generation: int, timeout_s: float
) -> None:
    store.set(f"handle/{generation}/{rank}", dist._get_reconfigure_handle())
    keys = [f"handle/{generation}/{peer}" for peer in range(world)]
    store.wait(keys, datetime.timedelta(seconds=timeout_s * 3))
    handles = [store.get(key).decode() for key in keys]
    # A list assigns ranks by position; the uuid must be fresh for every reconfiguration.
    dist._reconfigure(
        uuid=generation + 1, handles=handles, timeout=datetime.timedelta(seconds=timeout_s)
    ).wait()


def recover_in_place(
    mode: str,
    store: dist.Store,
    membership: Membership,
    timeout_s: float,
    window_s: float,
    announce: Any,
) -> tuple[Membership, list[int]]:
    """Rebuild the group after a failed collective; returns the new membership and the dead.

    ``announce(dead, generation)`` is called once the dead are known, before waiting for
    replacements, so the drill (standing in for a cluster scheduler) can start them.
    """
    generation = membership.generation + 1
    dead = agree_on_dead(store, generation, membership.world, window_s)
    if membership.rank in dead:
        raise RuntimeError(f"rank {membership.rank} was declared dead by its peers")
    if not dead:  # the step failed for another reason: nothing to recover from in place
        raise RuntimeError("a collective failed but every rank's heartbeat is alive")
    announce(dead, generation)
    if mode == "shrink":
        if not hasattr(dist, "shrink_group"):
            raise RecoveryUnsupported("torch.distributed has no shrink_group")
        try:
            dist.shrink_group(dead)
        except TypeError as exc:  # the documented answer of a backend that cannot shrink
            raise RecoveryUnsupported(f"shrink_group({dead}) raised TypeError: {exc}") from exc
        return Membership(dist.get_rank(), dist.get_world_size(), generation), dead
    _exchange_and_reconfigure(store, membership.rank, membership.world, generation, timeout_s)
    return Membership(membership.rank, membership.world, generation), dead


def agree_on_source(
    store: dist.Store, membership: Membership, completed_step: int
) -> tuple[int, int]:
    """(rank holding the most advanced state, its last completed step), same on all ranks."""
    prefix = f"progress/{membership.generation}"
    store.set(f"{prefix}/{membership.rank}", str(completed_step))
    keys = [f"{prefix}/{peer}" for peer in range(membership.world)]
    store.wait(keys, datetime.timedelta(seconds=60))
    steps = [int(store.get(key)) for key in keys]
    source = max(range(membership.world), key=lambda peer: (steps[peer], -peer))
    return source, steps[source]


def agree_on_checkpoint(store: dist.Store, membership: Membership, latest_step: int) -> int:
    """The newest checkpoint every rank has seen (-1: none), the same on all ranks.

    Each rank reads the ``latest`` marker itself; the smallest answer is one that every
    rank saw completed, even if one read the marker just before rank 0 moved it on.
    """
    prefix = f"checkpoint/{membership.generation}"
    store.set(f"{prefix}/{membership.rank}", str(latest_step))
    keys = [f"{prefix}/{peer}" for peer in range(membership.world)]
    store.wait(keys, datetime.timedelta(seconds=60))
    return min(int(store.get(key)) for key in keys)


def broadcast_state(tensors: list[torch.Tensor], source: int) -> None:
    """Overwrite ``tensors`` everywhere with the source rank's values."""
    for tensor in tensors:
        dist.broadcast(tensor, src=source)
