"""``--reduce``: a reproducer's inputs made smaller while the change still shows, within a
time budget, and how far that got.

Greedy: each step tries halving one tensor argument, in all its dimensions or in one (its
leading part kept: a leading block of a positive-definite matrix stays so), or a slower
benchmark's sizes or loop count (``timing_halvings.py``), writes the
script, runs it in both versions (``verify.py``) and keeps it when it still reproduces;
it stops when no halving reproduces or the budget is spent.
"""

from __future__ import annotations

import base64
import copy
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchcanary.repro.literals import contiguous_strides
from torchcanary.repro.reproducer import Reproducer, Reproduces, Verification
from torchcanary.repro.timing_halvings import timing_halvings
from torchcanary.section_types import Finding

# the kinds of findings whose inputs it shrinks: a changed call's tensor arguments; a
# slower benchmark's sizes and loop count (``timing_halvings.py``)
REDUCIBLE_KINDS = ("call", "timing")
# bytes per element of each dtype a tensor argument may have
_ELEMENT_BYTES = {
    "torch.float64": 8,
    "torch.float32": 4,
    "torch.float16": 2,
    "torch.bfloat16": 2,
    "torch.complex128": 16,
    "torch.complex64": 8,
    "torch.int64": 8,
    "torch.int32": 4,
    "torch.int16": 2,
    "torch.int8": 1,
    "torch.uint8": 1,
    "torch.uint16": 2,
    "torch.uint32": 4,
    "torch.uint64": 8,
    "torch.bool": 1,
}


@dataclass(frozen=True)
class Reduction:
    """How far reducing got: the steps kept, the tries, the seconds, and why it stopped."""

    kept: tuple[str, ...]
    tries: int
    seconds: float
    stopped: str

    def sentence(self) -> str:
        done = "; ".join(self.kept) if self.kept else "nothing smaller reproduced"
        return f"reduced: {done} ({self.tries} tries, {self.seconds:.0f} s; {self.stopped})"


def halvings(finding: Finding) -> Iterator[tuple[str, Finding]]:
    """Each smaller version of a finding: of a slower benchmark, see
    :func:`timing_halvings`; of a changed call, one contiguous tensor argument halved in
    every dimension, or in one."""
    if finding.kind == "timing":
        yield from timing_halvings(finding)
        return
    call = finding.facts.get("call")
    if not call:
        return
    for index, place, tensor in _tensors(call):
        if tensor.get("stride") != contiguous_strides(tensor["shape"]):
            continue
        if str(tensor["dtype"]) not in _ELEMENT_BYTES or "b64" not in (tensor["data"] or {}):
            continue
        halvable = [dim for dim, size in enumerate(tensor["shape"]) if size > 1]
        # every dimension at once first (a square matrix stays square), then each alone
        for dims in ([halvable] if len(halvable) > 1 else []) + [[dim] for dim in halvable]:
            smaller = copy.deepcopy(call)
            target = _tensors(smaller)[index][2]
            for dim in dims:
                _halve(target, dim)
            what = f"x{index} (argument {place}) {tensor['shape']} -> {target['shape']}"
            yield what, replace(finding, facts={**finding.facts, "call": smaller})


def _tensors(call: dict[str, Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """The call's tensor arguments, in the order a script defines them, with their place."""
    found: list[tuple[int, str, dict[str, Any]]] = []

    def walk(place: str, value: Any) -> None:
        if isinstance(value, dict) and value.get("t") == "tensor":
            found.append((len(found), place, value))
        elif isinstance(value, dict) and value.get("t") == "seq":
            for position, item in enumerate(value["items"]):
                walk(f"{place}.{position}", item)

    for position, arg in enumerate(call["args"]):
        walk(str(position), arg)
    for name, value in call["kwargs"].items():
        walk(name, value)
    return found


def _halve(tensor: dict[str, Any], dim: int) -> None:
    """Keep the leading half of ``dim`` (in place), its values and strides with it."""
    shape = list(tensor["shape"])
    size = _ELEMENT_BYTES[str(tensor["dtype"])]
    raw = base64.b64decode(tensor["data"]["b64"])
    old_strides = contiguous_strides(shape)
    shape[dim] = max(1, shape[dim] // 2)
    kept = bytearray()
    for index in itertools.product(*(range(n) for n in shape)):
        flat = sum(i * s for i, s in zip(index, old_strides, strict=True))
        kept += raw[flat * size : (flat + 1) * size]
    tensor["shape"] = shape
    tensor["stride"] = contiguous_strides(shape)
    tensor["data"] = {"b64": base64.b64encode(bytes(kept)).decode("ascii")}
    assert len(kept) == math.prod(shape) * size


def reduce(
    finding: Finding,
    write: Callable[[Finding], Reproducer],
    check: Callable[[Reproducer, Path], Verification],
    scratch: Path,
    budget_s: float,
) -> tuple[Finding, Reduction]:
    """The smallest finding found within ``budget_s`` whose script still reproduces
    (``check`` runs a script written in ``scratch``); the finding itself when none is."""
    started = time.monotonic()
    kept: list[str] = []
    tries = 0
    stopped = ""
    improved = True
    while improved:
        improved, stopped = False, "nothing left to halve"
        for what, smaller in halvings(finding):
            stopped = "no halving of any input reproduces"
            if time.monotonic() - started > budget_s:
                stopped = f"the budget of {budget_s:g} s is spent"
                break
            tries += 1
            reproducer = write(smaller)
            script = scratch / f"try-{tries}.py"
            script.write_text(reproducer.script)
            if check(reproducer, script).verdict is Reproduces.YES:
                finding, improved = smaller, True
                kept.append(what)
                break
    return finding, Reduction(tuple(kept), tries, time.monotonic() - started, stopped)
