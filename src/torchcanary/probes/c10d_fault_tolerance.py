"""Fault tolerance promoted into c10d: reconfiguration in place, RMA windows, Flight Recorder.

Each claim is exercised on a live gloo group of real rank processes (``run_ranks``), and
the rank-side functions live here at module level so a rank can import them by name. The
API the release describes is experimental and underscore-named in the build that has it
(``torch.distributed._reconfigure``, ``_new_window``); those are the names a user would
reach, so absence of them is reported as absent, never guessed from a version number.
"""

from __future__ import annotations

import datetime
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

_RECONFIGURE_API = ("_reconfigure", "_get_reconfigure_handle", "_supports_reconfigure")
_WINDOW_API = ("_new_window", "_supports_window")
_FAULT_TOLERANCE_NEIGHBOURS = ("shrink_group", "split_group")


def _exchange_handles(
    store: Any, round_name: str, rank: int, members: list[int], handle: str
) -> list[str]:
    """The out-of-band rendezvous the API asks for: every member's handle, in rank order."""
    store.set(f"canary-{round_name}/{rank}", handle)
    return [store.get(f"canary-{round_name}/{member}").decode() for member in members]


def reconfigure_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side: drop the last rank from WORLD in place, run collectives, then re-admit it.

    The survivors pass their handles in reverse order, so a correct reconfiguration must
    also swap their ranks; an all_gather of original rank ids shows whether it did.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store

    if not hasattr(dist, "_reconfigure"):
        report: dict[str, Any] = {"missing": True}
        try:
            dist.shrink_group([world_size - 1])
            report["shrink_group_on_gloo"] = "accepted"
        except Exception as exc:  # the neighbouring API's answer on gloo is evidence
            report["shrink_group_on_gloo"] = f"{type(exc).__name__}: {exc}"[:300]
        return report
    group = dist.group.WORLD
    store = _get_default_store()
    timeout = datetime.timedelta(seconds=30)
    report = {"supports_reconfigure": bool(dist._supports_reconfigure(group))}
    if not report["supports_reconfigure"]:
        return report
    survivors = list(range(world_size - 1))
    if rank in survivors:
        handles = _exchange_handles(
            store, "shrink", rank, survivors, dist._get_reconfigure_handle(group)
        )
        dist._reconfigure(
            uuid=101, handles=list(reversed(handles)), group=group, timeout=timeout
        ).wait()
        report["after_shrink"] = {"rank": dist.get_rank(group), "size": dist.get_world_size(group)}
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, group=group)
        gathered = [torch.zeros(1) for _ in survivors]
        dist.all_gather(gathered, torch.tensor([float(rank)]), group=group)
        report["shrunk_sum"] = value.item()
        report["shrunk_gather"] = [t.item() for t in gathered]
    handles = _exchange_handles(
        store, "regrow", rank, list(range(world_size)), dist._get_reconfigure_handle(group)
    )
    dist._reconfigure(uuid=102, handles=handles, group=group, timeout=timeout).wait()
    report["after_regrow"] = {"rank": dist.get_rank(group), "size": dist.get_world_size(group)}
    value = torch.full((4,), float(rank + 1))
    dist.all_reduce(value, group=group)
    report["regrown_sum"] = value.tolist()
    return report


def run_reconfigure(context: ProbeContext) -> Outcome:
    """Claim: a process group can be reconfigured in place (ranks leave and join) and keeps
    working.

    Decides on 3 live gloo ranks: the survivors reconfigure WORLD to 2 ranks (handles in
    reverse order), then all_reduce (expect 1+2=3) and all_gather (expect the swapped
    order); then all three reconfigure back and all_reduce (expect 6). Every number is
    compared with what plain arithmetic says it must be.
    """
    import torch.distributed as dist

    world_size = 3
    if not dist.is_available():
        return not_checkable("not checked: this build has no torch.distributed")
    values, failure = run_on_ranks(f"{__name__}:reconfigure_on_rank", world_size, timeout_s=90)
    if values is None:
        return refuted("the reconfiguration run did not complete on gloo", failure=failure)
    errors = raised(values)
    if errors:
        return refuted(f"reconfiguring a live gloo group raised: {errors[0]}", ranks=values)
    if values[0].get("missing"):
        present = [n for n in _FAULT_TOLERANCE_NEIGHBOURS if hasattr(dist, n)]
        return absent(
            "torch.distributed has no _reconfigure / reconfigure-handle API",
            missing=[n for n in _RECONFIGURE_API if not hasattr(dist, n)],
            present_neighbours=present,
            shrink_group_on_gloo=values[0].get("shrink_group_on_gloo"),
        )
    if not values[0]["supports_reconfigure"]:
        return not_checkable(
            "not checked: gloo reports supports_reconfigure=False; needs a "
            "backend that supports reconfiguration",
            ranks=values,
        )
    expected_sum = float(world_size * (world_size + 1) // 2)
    checks = {
        "shrunk to 2 ranks": all(v["after_shrink"]["size"] == world_size - 1 for v in values[:-1]),
        "ranks follow handle order": [v["after_shrink"]["rank"] for v in values[:-1]]
        == list(reversed(range(world_size - 1))),
        "all_reduce after shrink = 3": all(v["shrunk_sum"] == 3.0 for v in values[:-1]),
        "all_gather after shrink in new rank order": all(
            v["shrunk_gather"] == [1.0, 0.0] for v in values[:-1]
        ),
        "regrown to 3 ranks": all(v["after_regrow"]["size"] == world_size for v in values),
        "all_reduce after regrow = 6": all(v["regrown_sum"] == [expected_sum] * 4 for v in values),
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        return refuted(
            f"reconfigured group misbehaved: {', '.join(failed)}", checks=checks, ranks=values
        )
    return confirmed(
        "WORLD shrank 3->2 and regrew 2->3 in place on gloo; collectives after "
        "each step gave the expected numbers",
        checks=checks,
        ranks=values,
    )


def window_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side: try a one-sided window with and without a registered tensor."""
    import torch
    import torch.distributed as dist

    if not hasattr(dist, "_new_window"):
        return {"missing": True}
    report: dict[str, Any] = {"supports_window": bool(dist._supports_window())}
    try:
        window = dist._new_window(torch.zeros(4))
        report["window"] = type(window).__name__
    except Exception as exc:  # gloo's exact refusal is the evidence
        report["new_window_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return report


def window_put_on_cuda_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side on CUDA: each rank puts its id into the next rank's window and signals it.

    Tries the in-tree NCCL backends in turn and uses the first whose group supports windows.
    """
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    tried: dict[str, str] = {}
    for backend in ("nccl2", "nccl"):
        group = dist.new_group(
            list(range(world_size)), backend=backend, device_id=torch.device("cuda", rank)
        )
        if dist._supports_window(group):
            break
        tried[backend] = "supports_window=False"
    else:
        return {"supports_window": False, "tried": tried}
    local = torch.zeros(8, device="cuda")
    window = dist._new_window(local, group=group)
    peer = (rank + 1) % world_size
    source = (rank - 1) % world_size
    payload = torch.full((8,), float(rank + 10), device="cuda")
    window.put(payload, peer, 0, False)
    window.signal(peer, False)
    window.wait_signal(source, False)
    torch.cuda.synchronize()
    return {
        "supports_window": True,
        "backend": backend,
        "tried": tried,
        "received": local.tolist(),
        "expected": [float(source + 10)] * 8,
    }


def run_window(context: ProbeContext) -> Outcome:
    """Claim: c10d offers one-sided RMA windows (put into a peer's memory, signal, wait).

    Decides by creating a window on a live gloo group; where gloo declines and two CUDA
    GPUs are present, a put/signal ring on NCCL must deliver each neighbour's payload
    exactly. With neither, the claim is not checkable here and gloo's answer is shown.
    """
    import torch
    import torch.distributed as dist

    if not hasattr(dist, "_new_window"):
        return absent(
            "torch.distributed has no _new_window (one-sided window) API",
            missing=[n for n in _WINDOW_API if not hasattr(dist, n)],
        )
    values, failure = run_on_ranks(f"{__name__}:window_on_rank", 2, timeout_s=120)
    if values is None:
        return refuted("creating a window on gloo broke the group", failure=failure)
    if raised(values):
        return refuted(f"window probe raised on gloo: {raised(values)[0]}", ranks=values)
    gloo = values[0]
    if "window" in gloo:
        return confirmed("gloo created a one-sided window", gloo=gloo)
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        cuda_values, cuda_failure = run_on_ranks(
            f"{__name__}:window_put_on_cuda_rank", 2, timeout_s=120
        )
        if cuda_values is None:
            return refuted("the NCCL window ring did not complete", failure=cuda_failure, gloo=gloo)
        if raised(cuda_values):
            return refuted(
                f"NCCL window ring raised: {raised(cuda_values)[0]}", ranks=cuda_values, gloo=gloo
            )
        if not cuda_values[0]["supports_window"]:
            return refuted(
                "neither gloo nor NCCL supports windows in this build", gloo=gloo, nccl=cuda_values
            )
        exact = all(v["received"] == v["expected"] for v in cuda_values)
        verdict = confirmed if exact else refuted
        return verdict(
            "NCCL window put/signal ring "
            + ("delivered every payload" if exact else "delivered wrong data"),
            ranks=cuda_values,
            gloo=gloo,
        )
    return not_checkable(
        "not checked: gloo declines windows "
        f"({gloo.get('new_window_error', 'no error text')}); needs 2 CUDA GPUs for NCCL",
        gloo=gloo,
    )


def flight_recorder_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side: run four distinctive collectives on gloo, then dump the Flight Recorder."""
    import json

    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    value = torch.full((7,), float(rank + 1))
    dist.all_reduce(value)
    dist.broadcast(value, src=0)
    gathered = [torch.zeros(7) for _ in range(world_size)]
    dist.all_gather(gathered, value)
    dist.barrier()
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return {"dump_api": False, "c10d_names": [n for n in dir(c10d) if "trace" in n]}
    trace = json.loads(dump())
    entries = trace.get("entries", [])
    return {
        "dump_api": True,
        "sum": value.tolist(),
        "names": [e.get("profiling_name") for e in entries],
        "input_sizes": [e.get("input_sizes") for e in entries],
        "generic_hook": hasattr(c10d, "FlightRecorderHook"),
        "trace_keys": sorted(trace),
    }


def run_flight_recorder(context: ProbeContext) -> Outcome:
    """Claim: the Flight Recorder is not NCCL-only: it records collectives on other backends.

    Decides on 2 gloo ranks started with ``TORCH_FR_BUFFER_SIZE`` (the documented switch):
    after all_reduce, broadcast, all_gather and barrier on 7-element tensors, the dump
    must name each collective, in order, with the 7-element sizes we sent.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return not_checkable("not checked: this build has no torch.distributed")
    values, failure = run_on_ranks(
        f"{__name__}:flight_recorder_on_rank", 2, timeout_s=100, env={"TORCH_FR_BUFFER_SIZE": "64"}
    )
    if values is None:
        return refuted("gloo ranks with the Flight Recorder enabled failed", failure=failure)
    if raised(values):
        return refuted(f"Flight Recorder dump raised on gloo: {raised(values)[0]}", ranks=values)
    first = values[0]
    if not first["dump_api"]:
        return absent("no backend-neutral Flight Recorder dump (_dump_fr_trace_json)", ranks=values)
    wanted = ["all_reduce", "broadcast", "all_gather", "barrier"]
    names = [str(n) for n in first["names"]]
    matches = [next((n for n in names if n.endswith(w)), None) for w in wanted]
    found = [n for n in matches if n is not None]
    in_order = len(found) == len(wanted) and [names.index(f) for f in found] == sorted(
        names.index(f) for f in found
    )
    pairs = zip(names, first["input_sizes"], strict=True)
    sized = [size for name, size in pairs if not name.endswith("barrier")]
    if not names:
        return refuted("the Flight Recorder dump on gloo has no entries", ranks=values)
    if not (in_order and all(s == [[7]] for s in sized[:3])):
        return refuted(
            "the gloo Flight Recorder dump does not match what ran",
            names=names,
            input_sizes=first["input_sizes"],
        )
    return confirmed(
        f"gloo Flight Recorder recorded {', '.join(found)} in order with the sizes sent",
        names=names,
        input_sizes=first["input_sizes"],
        backend_neutral_hook_present=first["generic_hook"],
    )


PROBES = (
    Probe(
        id="c10d.reconfigure-in-place",
        claim="A live process group can drop and re-admit ranks in place and its "
        "collectives stay correct afterwards.",
        release_claim="Fault tolerance in c10d: In-place process-group reconfiguration",
        scope="gloo",
        run=run_reconfigure,
        needs=Needs(ranks=3),
        timeout_s=150,
    ),
    Probe(
        id="c10d.rma-window",
        claim="c10d offers one-sided RMA windows: a rank can put data into a peer's "
        "registered buffer and signal it.",
        release_claim="Fault tolerance in c10d: ... one-sided RMA windows",
        scope="gloo, cuda (2 GPUs)",
        run=run_window,
        needs=Needs(ranks=2),
        timeout_s=200,
    ),
    Probe(
        id="c10d.flight-recorder-gloo",
        claim="The Flight Recorder records collectives on gloo, not only on NCCL.",
        release_claim="a Flight Recorder that works across backends (not NCCL-only)",
        scope="gloo",
        run=run_flight_recorder,
        needs=Needs(ranks=2),
        timeout_s=120,
    ),
)
