"""Whether a call's baseline replay did what the recorded call did, without importing torch.

The recorder keeps each call's outcome (``worker/replay/record.py``): what it returned
(each output's metadata and a fingerprint of its values) or what it raised. A baseline
replay that returns where the call raised, raises something else, or computes other values
did not replay the user's call (an argument rebuilt otherwise, a mode not restored), so
comparing it with the candidate says nothing about the user's code. Values that are not
tensors (a Python number, a bool, a size) are checked too: ``x.item()`` or
``torch.equal`` replayed on other arguments returns another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COMPARED_METADATA = ("dtype", "shape", "device", "layout")
# A fingerprint's sums may differ by summation order (threads, another kernel); beyond
# this share of the values' magnitude the replay computed something else.
_FINGERPRINT_RTOL = 1e-3


def unfaithful(
    recorded: Mapping[str, Any], status: str, exception: Any, outputs: Any, mutated: Any = ()
) -> str | None:
    """Why a baseline replay (its ``status``, ``exception`` (type, message), encoded
    ``outputs`` and the arguments it changed, ``mutated``) does not reproduce the
    ``recorded`` outcome; None when it does."""
    if not recorded:
        return "no outcome was recorded for this call"
    if recorded.get("status") == "raised":
        raised = recorded.get("exception") or {}
        if status != "raised" or exception is None:
            return _told(f"raised {_kind(raised.get('type'))}", _words(status))
        if exception[0] != raised.get("type"):
            return _told(f"raised {_kind(raised.get('type'))}", f"raised {_kind(exception[0])}")
        return None
    if status != "returned":
        return _told("returned", _words(status, exception))
    kept = list(recorded.get("outputs") or [])
    if len(kept) != len(outputs):
        return _told(f"{len(kept)} output(s)", f"{len(outputs)}")
    for index, (before, now) in enumerate(zip(kept, outputs, strict=True)):
        found = _output_unfaithful(before, now)
        if found is not None:
            return f"output {index}: {found}"
    if "mutated" in recorded:  # an ATen operator: its schema told what it writes
        return _writes_unfaithful(recorded["mutated"], mutated)
    return None


def _writes_unfaithful(written: Any, mutated: Any) -> str | None:
    """Whether the replay changed the arguments the recorded call wrote, to the values it
    wrote: an argument the call did not write, or wrote to other values, or one it changed
    that the replay left as it was, is another call."""
    recorded = {str(w["arg"]): w for w in written}
    changed = {str(m["arg"]): m for m in mutated}
    for place, now in changed.items():
        was = recorded.get(place)
        if was is None:
            return _told(f"argument {place} not written", "changed")
        found = _fingerprint_unfaithful(was.get("fingerprint"), now.get("fingerprint"))
        if found is not None:
            return f"argument {place} after the call: {found}"
    for place, was in recorded.items():
        moved = _fingerprint_unfaithful(was.get("before"), was.get("fingerprint"))
        if place not in changed and moved is not None:
            return _told(f"argument {place} changed", "unchanged")
    return None


def _told(when_recorded: str, when_replayed: str) -> str:
    return f"{when_recorded} when recorded, {when_replayed} in the baseline replay"


def _kind(name: Any) -> str:
    return str(name).removeprefix("builtins.")


def _words(status: str, exception: Any = None) -> str:
    if status == "raised" and exception is not None:
        return f"raised {_kind(exception[0])}"
    return {"returned": "returned", "missing": "missing"}.get(status, status)


def _output_unfaithful(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    if before.get("t") == "unchecked":  # an address of the recording process: no replay has it
        return None
    if before.get("t") != now.get("t"):
        return _told(f"a {before.get('t')}", f"a {now.get('t')}")
    if before.get("t") == "seq":
        items_before, items_now = before.get("items", []), now.get("items", [])
        if len(items_before) != len(items_now):
            return _told(f"{len(items_before)} item(s)", f"{len(items_now)}")
        for a, b in zip(items_before, items_now, strict=True):
            found = _output_unfaithful(a, b)
            if found is not None:
                return found
        return None
    if before.get("t") != "tensor":
        return _value_unfaithful(before, now)
    for key in _COMPARED_METADATA:
        if before.get(key) != now.get(key):
            return _told(f"{key} {before.get(key)}", f"{now.get(key)}")
    return _fingerprint_unfaithful(before.get("fingerprint"), now.get("fingerprint"))


def _value_unfaithful(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """A value that is not a tensor (``.item()``, ``torch.equal``, a size): equal, a float
    within the fingerprints' share (another summation order), or the replay computed
    something else."""
    if before == now:
        return None
    if before.get("t") == "scalar" and before.get("type") == now.get("type") == "float":
        try:
            was, is_now = float(before["v"]), float(now["v"])
        except (TypeError, ValueError):
            was = is_now = float("nan")
        if abs(was - is_now) <= _FINGERPRINT_RTOL * max(abs(was), abs(is_now)):
            return None
    return _told(f"the value {_shown(before)}", _shown(now))


def _shown(value: Mapping[str, Any]) -> str:
    return repr(value["v"]) if "v" in value else str(value.get("type") or value.get("t"))


def _fingerprint_unfaithful(before: Any, now: Any) -> str | None:
    if not before or not now:
        return None  # values not fingerprinted (random draws, uninitialised memory)
    if before["nonfinite"] != now["nonfinite"]:
        return _told(f"{before['nonfinite']} non-finite value(s)", f"{now['nonfinite']}")
    scale = max(abs(before["abs"]), abs(now["abs"]))
    for key in ("sum", "abs"):
        if abs(before[key] - now[key]) > _FINGERPRINT_RTOL * scale:
            return _told(f"values sum to {before[key]:.6g}", f"{now[key]:.6g}")
    return None
