"""Compares one recorded call's replays across the environments, without importing torch.

A call was recorded under the baseline (``calls.jsonl``) and replayed in the candidate, in
the baseline, and in the baseline again as the control (``replay-<role>.jsonl``, written by
``worker/replay``). The baseline replay is the reference: what the candidate does
differently is a change, unless the baseline's own two replays already disagree (then the
call is nondeterministic and nothing is claimed). Tensor values of any size (inline, base64,
or in the replay's values file; native byte order) are compared with the comparator the stack
and the workloads share (``numerics_diff.py``), with the dtype's default tolerance; an
output whose values were not kept is compared by its fingerprint (the sums of its values
and of their magnitudes), which differs beyond what the tolerance allows only when some
element does.
"""

from __future__ import annotations

import base64
import cmath
import enum
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary import numerics_diff
from torchcanary.calls.faithful import unfaithful

_METADATA_KEYS = ("dtype", "shape", "stride", "device", "layout", "alias_of")
_NOT_REPLAYABLE = "not-replayable"  # the replayer's own word: the call cannot be rebuilt
_NOT_RUN = {"crashed", "timeout"}  # the replay broke off: the call was never compared
_UNINITIALISED = "uninitialised memory (torch.empty and kin)"
_FLOAT64_UNIT = 2.0**-53  # float64's unit roundoff
# A complex tensor's bytes are its real and imaginary parts side by side; its values are
# compared as assert_close does, with its parts' float type's tolerance, not byte for byte.
_COMPLEX_PARTS = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}


class CallVerdict(str, enum.Enum):
    """What changed for one recorded call, most serious first."""

    RAISES_NOW = "raises-now"
    DIFFERENT_RESULT = "different-result"
    NEW_WARNING = "new-warning"
    NOT_REPLAYABLE = "not-replayable"
    NOT_FAITHFUL = "replay-not-faithful"  # the baseline replay did not do what the call did
    NOT_RUN = "not-run"  # its replay crashed, timed out or is missing: it says nothing
    NONDETERMINISTIC = "nondeterministic"
    SAME = "same"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Replay:
    """One call's replay in one environment, as ``worker/replay`` wrote it."""

    status: str
    exception: tuple[str, str] | None = None
    warnings: tuple[tuple[str, str], ...] = ()
    outputs: tuple[Mapping[str, Any], ...] = ()
    mutated: tuple[Mapping[str, Any], ...] = ()  # tensor arguments the call changed

    @classmethod
    def from_json(
        cls, line: Mapping[str, Any], values_defined: bool = True, values_file: Path | None = None
    ) -> Replay:
        """``values_defined`` False (``torch.empty`` and kin: uninitialised memory): its
        output tensors are compared by metadata only. ``values_file``: the replay's values
        file, which outputs too large for the line point into."""
        raised = line.get("exception")

        def kept(out: Mapping[str, Any]) -> Mapping[str, Any]:
            if out.get("t") != "tensor":
                return out
            if not values_defined:
                return {**out, "data": None, "fingerprint": None, "why_no_data": _UNINITIALISED}
            data = out.get("data")
            if data and "offset" in data:
                return {**out, "data": {**data, "file": str(values_file)}}
            return out

        return cls(
            str(line["status"]),
            (str(raised["type"]), str(raised.get("message", ""))) if raised else None,
            tuple((str(w["category"]), str(w["message"])) for w in line.get("warnings", [])),
            tuple(kept(out) for out in line.get("outputs", [])),
            tuple(kept(out) for out in line.get("mutated", [])),
        )

    def describe(self) -> str:
        if self.status == "raised" and self.exception:
            kind = self.exception[0].removeprefix("builtins.")
            return f"raises {kind}: {_first_line(self.exception[1])}"
        if self.status == "missing":
            return "the callable does not exist"
        return {"returned": "returns"}.get(self.status, self.status)


@dataclass(frozen=True)
class CallComparison:
    """The verdict on one call and the words that say why."""

    verdict: CallVerdict
    detail: str
    new_warnings: list[str] = field(default_factory=list)
    gone_warnings: list[str] = field(default_factory=list)
    max_rel_err: float | None = None
    # why its values were not compared, only its metadata (None: compared by value, or not
    # a verdict that compares values)
    metadata_only: str | None = None


def compare_call(
    baseline: Replay | None,
    candidate: Replay | None,
    control: Replay | None = None,
    why_not: str | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> CallComparison:
    """The verdict on one call from its replays (None: that replay is missing).

    ``why_not`` is the recording's reason a call cannot be replayed at all; ``recorded`` is
    its recorded outcome, which the baseline replay must reproduce (None: not checked; empty:
    none was recorded, so the replay cannot be trusted).
    """
    if why_not is not None:
        return CallComparison(CallVerdict.NOT_REPLAYABLE, why_not)
    for role, replay in (("baseline", baseline), ("candidate", candidate)):
        if replay is None or replay.status in _NOT_RUN:
            happened = "no replay written" if replay is None else replay.status
            return CallComparison(CallVerdict.NOT_RUN, f"{happened} when replayed in the {role}")
    assert baseline is not None and candidate is not None  # a missing replay is not run
    for role, replay in (("baseline", baseline), ("candidate", candidate)):
        if replay.status == _NOT_REPLAYABLE:
            return CallComparison(CallVerdict.NOT_REPLAYABLE, f"not replayable in the {role}")
    if recorded is not None:
        strayed = unfaithful(
            recorded, baseline.status, baseline.exception, baseline.outputs, baseline.mutated
        )
        if strayed is not None:
            return CallComparison(CallVerdict.NOT_FAITHFUL, f"replay not faithful: {strayed}")
    base_words, cand_words = baseline.describe(), candidate.describe()
    # raising now is never put down to chance: a control that differs cannot excuse it
    if candidate.status in ("raised", "missing") and baseline.status == "returned":
        return CallComparison(
            CallVerdict.RAISES_NOW, f"{base_words} in the baseline, {cand_words} in the candidate"
        )
    if control is not None and _differences(baseline, control):
        escaped = _beyond_control(baseline, candidate, control)
        if not escaped:
            return CallComparison(
                CallVerdict.NONDETERMINISTIC,
                "differs between two replays in the baseline, and the candidate no more",
            )
        place, (words, rel) = escaped[0]
        if place not in _STRUCTURAL:  # values the control does not vary: named, not the first
            detail = f"{place}: {words} (beyond what the baseline's two replays show)"
            return CallComparison(CallVerdict.DIFFERENT_RESULT, detail, max_rel_err=rel)
    if baseline.status != candidate.status or baseline.exception != candidate.exception:
        detail = f"{base_words} in the baseline, {cand_words} in the candidate"
        if base_words == cand_words and baseline.exception and candidate.exception:
            detail = f"{cand_words} in both; the message now adds: " + _first_line(
                _added_lines(baseline.exception[1], candidate.exception[1])
            )
        return CallComparison(CallVerdict.DIFFERENT_RESULT, detail)
    result = _difference(baseline, candidate)
    if result is not None:
        detail, rel = result
        return CallComparison(CallVerdict.DIFFERENT_RESULT, detail, max_rel_err=rel)
    unvalued = _metadata_only(baseline) or _metadata_only(candidate)
    base_warn, cand_warn = set(baseline.warnings), set(candidate.warnings)
    new = [f"{c}: {m}" for c, m in sorted(cand_warn - base_warn)]
    gone = [f"{c}: {m}" for c, m in sorted(base_warn - cand_warn)]
    if new:
        words = f"new warning {new[0]}"
        return CallComparison(CallVerdict.NEW_WARNING, words, new, gone, metadata_only=unvalued)
    detail = f"same; warning gone: {gone[0]}" if gone else "same"
    return CallComparison(CallVerdict.SAME, detail, [], gone, metadata_only=unvalued)


def _metadata_only(replay: Replay) -> str | None:
    """Why some tensor this replay gave (returned or changed) was kept without its values."""
    for output in (*replay.outputs, *replay.mutated):
        reason = _unvalued(output)
        if reason is not None:
            return reason
    return None


def _unvalued(output: Mapping[str, Any]) -> str | None:
    if output.get("t") == "seq":
        reasons = (_unvalued(item) for item in output.get("items", []))
        return next((reason for reason in reasons if reason is not None), None)
    if output.get("t") == "tensor" and not output.get("data"):
        return str(output.get("why_no_data") or "values not kept")
    if output.get("t") == "opaque":  # a storage, a generator, a custom object: its type alone
        return f"an output of type {output.get('type')}, compared by its type only"
    return None


def _beyond_control(
    baseline: Replay, candidate: Replay, control: Replay
) -> list[tuple[str, tuple[str, float | None]]]:
    """The places (outputs, changed arguments) where the candidate strays from the baseline
    further than the control does: where it differs from the control too, and the control
    agrees with the baseline there, or differs there by a smaller relative difference (or
    one without a measure). Judged place by place: a control that varies one output says
    nothing of another."""
    shown = _differences(baseline, control)
    beside_control = _differences(control, candidate)
    structural = any(place in _STRUCTURAL for place in beside_control)
    escaped = []
    for place, (words, rel) in _differences(baseline, candidate).items():
        if place not in beside_control and not structural:
            continue  # the candidate does there what the control does
        seen = shown.get(place)
        if seen is None or seen[1] is None or rel is None or rel > seen[1]:
            escaped.append((place, (words, rel)))
    return escaped


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _added_lines(before: str, after: str) -> str:
    """The lines of ``after`` that ``before`` lacks (what a changed message adds)."""
    known = set(before.splitlines())
    return "\n".join(line for line in after.splitlines() if line not in known)


# places that are not one output or argument: the whole outcome, the number of outputs,
# which arguments changed
_STRUCTURAL = ("outcome", "outputs", "changed arguments")


def _difference(reference: Replay, other: Replay) -> tuple[str, float | None] | None:
    """How ``other``'s outputs differ from ``reference``'s, first place first (None: they
    agree)."""
    found = _differences(reference, other)
    if not found:
        return None
    place, (words, rel) = next(iter(found.items()))
    return (words if place in _STRUCTURAL else f"{place}: {words}"), rel


def _differences(reference: Replay, other: Replay) -> dict[str, tuple[str, float | None]]:
    """Every place where ``other`` differs from ``reference``: ``output <i>`` and
    ``argument <name>`` -> (words, relative difference or None); one structural place
    (``_STRUCTURAL``) alone when the two cannot be compared place by place."""
    if reference.status != other.status or reference.exception != other.exception:
        return {"outcome": (f"{reference.describe()}, then {other.describe()}", None)}
    if len(reference.outputs) != len(other.outputs):
        words = f"{len(reference.outputs)} output(s), then {len(other.outputs)}"
        return {"outputs": (words, None)}
    changed_before = [str(m["arg"]) for m in reference.mutated]
    changed_now = [str(m["arg"]) for m in other.mutated]
    if changed_before != changed_now:
        said = [", ".join(places) or "none" for places in (changed_before, changed_now)]
        return {"changed arguments": (f"changes argument(s) {said[0]}, then {said[1]}", None)}
    found: dict[str, tuple[str, float | None]] = {}
    for index, (ref, out) in enumerate(zip(reference.outputs, other.outputs, strict=True)):
        output_found = _output_difference(ref, out)
        if output_found is not None:
            found[f"output {index}"] = output_found
    for before, now in zip(reference.mutated, other.mutated, strict=True):
        argument_found = _output_difference(before, now)
        if argument_found is not None:
            found[f"argument {before['arg']} after the call"] = argument_found
    return found


def _output_difference(
    ref: Mapping[str, Any], out: Mapping[str, Any]
) -> tuple[str, float | None] | None:
    if ref.get("t") != out.get("t"):
        return f"a {ref.get('t')} before, a {out.get('t')} now", None
    if ref.get("t") == "seq":
        items_ref, items_out = ref.get("items", []), out.get("items", [])
        if len(items_ref) != len(items_out) or ref.get("kind") != out.get("kind"):
            words = f"{ref.get('kind')} of {len(items_ref)}, then {out.get('kind')}"
            return f"{words} of {len(items_out)}", None
        for a, b in zip(items_ref, items_out, strict=True):
            found = _output_difference(a, b)
            if found is not None:
                return found
        return None
    if ref.get("t") != "tensor":
        return None if ref == out else (f"{ref.get('v')!r}, then {out.get('v')!r}", None)
    for key in _METADATA_KEYS:
        if ref.get(key) != out.get(key):
            return f"{key} {ref.get(key)} -> {out.get(key)}", None
    if not ref.get("data") or not out.get("data"):
        return _fingerprint_difference(ref, out)
    ref_bytes, out_bytes = _values(ref), _values(out)
    if ref_bytes == out_bytes:
        return None
    # a sparse or quantized output's values are dense, or dequantized, in another dtype
    dtype = ref["data"].get("dtype", ref["dtype"])
    if dtype != out["data"].get("dtype", out["dtype"]):
        return f"values in {dtype}, then {out['data'].get('dtype', out['dtype'])}", None
    return _values_difference({**ref, "dtype": dtype}, ref_bytes, out_bytes)


def _values(output: Mapping[str, Any]) -> bytes:
    """A tensor output's bytes: inline, or read from the replay's values file."""
    data = output["data"]
    if "b64" in data:
        return base64.b64decode(data["b64"])
    with open(data["file"], "rb") as kept:
        kept.seek(int(data["offset"]))
        return kept.read(int(data["length"]))


def _fingerprint_difference(
    ref: Mapping[str, Any], out: Mapping[str, Any]
) -> tuple[str, float | None] | None:
    """Two outputs whose values were not kept, by their fingerprints: when every element is
    within ``atol + rtol * |ref|``, the sums (of values, and of magnitudes) differ by at most
    ``count * atol + rtol * sum(|ref|)``, so a larger difference proves a changed element."""
    before, after = ref.get("fingerprint"), out.get("fingerprint")
    if not before or not after:
        return None  # nothing of the values is known: compared by metadata only
    if before["nonfinite"] != after["nonfinite"]:
        return f"{before['nonfinite']} non-finite value(s), then {after['nonfinite']}", None
    dtype = str(ref["dtype"]).removeprefix("torch.")
    rtol, atol = numerics_diff.DEFAULT_TOLERANCES.get(_COMPLEX_PARTS.get(dtype, dtype), (0.0, 0.0))
    count = math.prod(int(size) for size in ref["shape"]) * (2 if dtype in _COMPLEX_PARTS else 1)
    # plus what summing ``count`` values in float64 in another order may move the sums
    allowed = count * atol + (rtol + count * _FLOAT64_UNIT) * float(before["abs"])
    for key, words in (("sum", "sum of values"), ("abs", "sum of magnitudes")):
        gap = abs(float(after[key]) - float(before[key]))
        if gap > allowed:
            rel = gap / abs(float(before["abs"])) if before["abs"] else None
            return (
                f"{words} {before[key]:.6g} -> {after[key]:.6g}, beyond what the tolerance "
                f"allows ({allowed:.3g}; values compared by their fingerprint)",
                rel,
            )
    return None


def _values_difference(
    meta: Mapping[str, Any], ref_bytes: bytes, out_bytes: bytes
) -> tuple[str, float | None] | None:
    """Values compared by ``numerics_diff.compare``, the comparator the stack shares."""
    dtype = str(meta["dtype"]).removeprefix("torch.")
    shape = tuple(int(n) for n in meta["shape"])
    if dtype in _COMPLEX_PARTS:
        return _complex_difference(_COMPLEX_PARTS[dtype], ref_bytes, out_bytes)
    if dtype not in numerics_diff.DECODABLE:
        return None if ref_bytes == out_bytes else (f"{dtype} values differ bytewise", None)
    reference, other = (
        numerics_diff.TensorRecord("output", dtype, shape, sys.byteorder, raw)
        for raw in (ref_bytes, out_bytes)
    )
    tolerance = numerics_diff.tolerance_for(dtype, None, None, None)
    found = numerics_diff.compare(reference, other, tolerance)
    if not found.drift:
        return None
    rtol = found.tolerance.get("rtol", 0.0)
    return (
        f"max relative difference {found.max_rel_err:.3g} (tolerance {rtol:g}): {found.reason}",
        found.max_rel_err,
    )


def _complex_difference(
    parts: str, ref_bytes: bytes, out_bytes: bytes
) -> tuple[str, float | None] | None:
    """Complex values as ``assert_close`` compares them: each value's distance from the
    baseline's, ``|out - ref|``, within ``atol + rtol * |ref|`` (the tolerance of the float
    type of its parts), so a large real part lets a small imaginary part move as much as
    that tolerance allows; a NaN or an infinity where the baseline had none (or the other
    way) is a change whatever its size."""
    ref_values, out_values = (_complex_values(parts, raw) for raw in (ref_bytes, out_bytes))
    rtol, atol = numerics_diff.DEFAULT_TOLERANCES[parts]
    beyond, worst = 0, 0.0
    for ref, out in zip(ref_values, out_values, strict=True):
        if not (cmath.isfinite(ref) and cmath.isfinite(out)):
            same_pattern = all(
                (a != a and b != b) or a == b
                for a, b in ((ref.real, out.real), (ref.imag, out.imag))
            )
            if not same_pattern:
                beyond, worst = beyond + 1, math.inf
            continue
        error = abs(out - ref)
        if error > atol + rtol * abs(ref):
            beyond += 1
            worst = max(worst, error / abs(ref) if ref else math.inf)
    if not beyond:
        return None
    words = f"{beyond} of {len(ref_values)} complex value(s) beyond tolerance"
    return f"max relative difference {worst:.3g} (tolerance {rtol:g}): {words}", worst


def _complex_values(parts: str, raw: bytes) -> list[complex]:
    """Complex values from their bytes: real and imaginary parts of type ``parts`` side by
    side."""
    count = len(raw) // (2 * numerics_diff.FLOAT_BITS[parts] // 8)
    record = numerics_diff.TensorRecord("output", parts, (count, 2), sys.byteorder, raw)
    flat = numerics_diff.decode(record)
    return [complex(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
