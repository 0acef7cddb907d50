"""Arguments and outputs of a torch call as plain JSON, and back: the recording format.

A recording is a folder:

- ``calls.jsonl``: one JSON line per distinct call, ``{"id", "level": "api"|"aten",
  "callable": qualified name, "site": {"file", "line", "function"}, "signature": str,
  "count": int, "args": [...], "kwargs": {...}, "replayable": bool, "why_not": str|null,
  "context", "outcome"}``; ``context`` is the modes it ran under (``context.py``), restored
  at replay; ``outcome`` is what the first of its kind did, which its baseline replay
  must reproduce: ``{"status": "returned", "outputs": [...]}`` (tensors described with a
  ``fingerprint``, below; an ATen operator's also ``"mutated"``: each argument its schema
  says it writes, ``{"arg": place as the replay names it, "before": fingerprint, ...the
  tensor after the call}``) or ``{"status": "raised", "exception": {"type", "message"}}``;
  the value of a call such as ``Tensor.data_ptr`` (the recording process's own) is kept as
  ``{"t": "unchecked", "why"}``.
  ``callable`` is what replay looks up from ``torch``: ``torch.add``,
  ``torch.nn.functional.relu``, ``torch.Tensor.add`` (api) or ``torch.ops.aten.add.Tensor``
  (aten). Calls are distinct by (site, callable, signature, context); ``count`` says how
  often each ran.
  Calls are grouped by (site, callable, class: each argument's type, a tensor's dtype,
  rank, device and grad; context), ``group`` the group's number; a group keeps a bounded
  sample (``record.py``: a few concrete signatures, a few distinct values each, told apart
  by ``values_key``, a hash of their small tensors' bytes); the calls past it are counted
  in meta's ``not_sampled``, not kept (a call whose signature has all its values already
  among them, its values not hashed: a sample's ``count`` is of the calls like it while
  its signature still had room).
- ``values.bin``: the bytes of every kept call's tensor arguments, whatever their size
  (contiguous, native byte order; the same bytes kept once), referenced by offset and length.
- ``meta.json``: ``{"format", "seed", "torch", "calls", "distinct", "groups", "not_sampled",
  "not_sampled_by": {callable: count}, "not_replayable": {why_not: count}, "values_bytes",
  "values_budget"}``.

Encoded values:

- ``{"t": "tensor", "dtype", "shape", "stride", "device", "layout", "requires_grad",
  "data": {"offset", "length"}|null}``: a tensor; ``data`` is null when it was too large,
  over the budget or not on a readable device (the call is then not replayable and
  ``why_not`` says which);
- ``{"t": "scalar", "v", "type"}``: ``type`` is bool, int, float, complex or str; a float that
  is not finite has ``v`` "nan", "inf" or "-inf", a complex ``v`` is ``[real, imag]``;
- ``{"t": "seq", "kind": "list"|"tuple", "items"}``;
- ``{"t": "dtype"|"device"|"layout"|"memory_format", "v"}`` (``v`` as torch spells it);
- ``{"t": "slice", "start", "stop", "step"}`` and ``{"t": "ellipsis"}`` (indexing);
- ``{"t": "none"}``;
- a numpy value: a numpy array as a tensor (its values copied) with ``"numpy": true``, a
  numpy scalar as a scalar with ``"numpy"`` its type (``"int64"``); both rebuilt as numpy's;
- ``{"t": "opaque", "type"}``: anything else (a custom object, a generator, a file): the call
  is counted, named and not replayed.

A replay result line (``replay-<role>.jsonl``) carries its outputs in the same encoding, with
``data`` inline as ``{"b64": ...}`` (up to 4096 elements) or, for a larger output, as
``{"offset", "length"}`` in ``replay-<role>.values.bin`` beside it (every value, whatever the
size, up to the replay's values budget), and a tensor output's ``alias_of`` (the index of
the positional argument whose storage it shares, or null). Output tensors, recorded or
replayed, carry ``fingerprint``: ``{"sum", "abs", "nonfinite"}`` over all their values
(float64), or null where the values cannot be read or were a random draw; a replayed tensor
without ``data`` says why in ``why_no_data``.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import math
import mmap
import sys
from collections.abc import Hashable
from typing import Any, BinaryIO

import torch

FORMAT_VERSION = 3  # 2: each call keeps its outcome; 3: calls sampled per group
MAX_MESSAGE = 2000  # characters of an exception's message kept
MAX_ELEMENTS = 4096  # a replay's output with more elements goes to its values file
# bytes of values.bin in all (a safety stop: a group keeps a bounded sample, so a suite
# stays far below it); beyond it, data null
VALUES_BUDGET = 4 << 30
# bytes of one replay's values file in all: outputs past it are compared by fingerprint
REPLAY_VALUES_BUDGET = 1 << 30
Values = bytes | mmap.mmap  # a values file, read or mapped
_NAMED = {torch.dtype: "dtype", torch.device: "device", torch.layout: "layout"}
_SCALARS = (bool, int, float, complex, str)


class NotReplayable(Exception):
    """An encoded value that cannot be rebuilt; ``str()`` says why."""


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The elements' bytes, contiguous; read through ctypes so numpy is not needed (bytes,
    not values, so a NaN left in place is unchanged). A conjugated or negated view
    (``Tensor.conj``: a bit on the view, its storage unchanged) is resolved first: its
    storage's bytes are not its values."""
    flat = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous()
    size = flat.numel() * flat.element_size()
    return ctypes.string_at(flat.data_ptr(), size) if size else b""


def _unreadable(tensor: torch.Tensor) -> str | None:
    """Why a tensor's values cannot be read at all, whatever its size, or None."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        return f"tensor subclass {type(tensor).__name__}"
    if tensor.layout != torch.strided:
        return f"layout {tensor.layout}"
    if tensor.device.type == "meta":
        return "meta tensor"
    if tensor.is_quantized:
        return "quantized tensor"
    return None


def tensor_meta(tensor: torch.Tensor) -> dict[str, Any]:
    """A tensor's description without its values."""
    strided = tensor.layout == torch.strided
    return {
        "t": "tensor",
        "dtype": str(tensor.dtype),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()) if strided else None,
        "device": str(tensor.device),
        "layout": str(tensor.layout),
        "requires_grad": bool(tensor.requires_grad),
        "data": None,
    }


def _scalar(value: bool | int | float | complex | str) -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        return {"t": "scalar", "v": str(value), "type": "float"}
    if isinstance(value, complex):
        return {"t": "scalar", "v": [value.real, value.imag], "type": "complex"}
    return {"t": "scalar", "v": value, "type": type(value).__name__}


def describe(value: Any, tensor: Any, why_not: list[str]) -> dict[str, Any]:
    """Encode ``value``; ``tensor(t)`` encodes each tensor; reasons it cannot be replayed are
    appended to ``why_not``."""
    if isinstance(value, torch.Tensor):
        return tensor(value)
    if value is None:
        return {"t": "none"}
    if isinstance(value, _SCALARS) and not _is_numpy(value):  # numpy's float64 is a float
        return _scalar(value)
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {"t": "seq", "kind": kind, "items": [describe(v, tensor, why_not) for v in value]}
    if type(value) in _NAMED:
        return {"t": _NAMED[type(value)], "v": str(value)}
    if isinstance(value, torch.memory_format):
        return {"t": "memory_format", "v": str(value)}
    if isinstance(value, slice):
        parts = [describe(v, tensor, why_not) for v in (value.start, value.stop, value.step)]
        return {"t": "slice", "start": parts[0], "stop": parts[1], "step": parts[2]}
    if value is Ellipsis:
        return {"t": "ellipsis"}
    from_numpy = _numpy_value(value)
    if from_numpy is not None:  # as a tensor or a scalar, with the numpy type to rebuild
        encoded = describe(from_numpy, tensor, why_not)
        return {**encoded, "numpy": type(value).__name__ if encoded["t"] == "scalar" else True}
    kind = type(value).__module__ + "." + type(value).__qualname__
    why_not.append(f"argument of type {kind}")
    return {"t": "opaque", "type": kind}


def _is_numpy(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.generic)


def _numpy_value(value: Any) -> Any:
    """A numpy array as a tensor (a copy: its memory is numpy's) or a numpy scalar as
    Python's own; None for anything else, or an array of a dtype torch has not (strings,
    objects). numpy is not imported here: a value can only be numpy's once it is."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return None
    if isinstance(value, numpy.generic) and not isinstance(value, numpy.void):
        item = value.item()
        return item if isinstance(item, _SCALARS) else None
    if isinstance(value, numpy.ndarray):
        try:
            return torch.tensor(value)
        except (TypeError, RuntimeError, ValueError):
            return None
    return None


def signature_of(encoded: Any) -> str:
    """A short text for an encoded value, without tensor data: what makes two calls the same."""
    if isinstance(encoded, list):
        return ", ".join(signature_of(e) for e in encoded)
    if isinstance(encoded, dict) and "t" not in encoded:
        return ", ".join(f"{k}={signature_of(v)}" for k, v in encoded.items())
    kind = encoded["t"]
    if kind == "tensor":
        grad = "+grad" if encoded["requires_grad"] else ""
        dims = ",".join(map(str, encoded["shape"]))
        return f"{encoded['dtype'][6:]}[{dims}]/{encoded['stride']}@{encoded['device']}{grad}"
    if kind == "seq":
        inner = signature_of(encoded["items"])
        return f"[{inner}]" if encoded["kind"] == "list" else f"({inner})"
    if kind == "scalar":
        return repr(encoded["v"])
    if kind == "slice":
        return ":".join(signature_of(encoded[k]) for k in ("start", "stop", "step"))
    if kind == "opaque":
        return f"<{encoded['type']}>"
    return str(encoded.get("v", kind))


def kind_of(value: Any) -> Hashable:
    """What a call's argument is, as a group key: a tensor's dtype, rank, device and grad,
    another value's type (a sequence's items', each kind once). Taken at every recorded
    call, before anything else about its arguments: tuples, not text, a plain value's kind
    looked up by its type, and nothing a call counted past its group's sample does not
    need."""
    plain = _plain_kinds.get(type(value))
    if plain is not None:
        return plain
    if isinstance(value, torch.Tensor):
        return value.dtype, value.dim(), value.device, value.requires_grad
    if isinstance(value, (list, tuple)):
        kinds: list[Hashable] = []
        for item in value:  # a loop, not a call per item: the items are mostly tensors
            item_kind: Hashable = _plain_kinds.get(type(item))
            if item_kind is None:
                if isinstance(item, torch.Tensor):
                    item_kind = item.dtype, item.dim(), item.device, item.requires_grad
                else:
                    item_kind = kind_of(item)
            kinds.append(item_kind)
        return type(value), tuple(dict.fromkeys(kinds))
    if isinstance(value, dict):
        return tuple([(key, kind_of(item)) for key, item in value.items()])
    plain = _plain_kinds[type(value)] = type(value).__name__
    return plain


# The kind of a value of a type that is no tensor, sequence or mapping: its type's name.
_plain_kinds: dict[type, str] = {kind: kind.__name__ for kind in (*_SCALARS, type(None))}


def concrete_of(value: Any) -> Hashable:
    """A call's argument in full, within its group: a tensor's kind with its shape and
    strides, a scalar's value (by repr: a NaN equals itself), another value as its
    signature spells it. Taken only for a call its group may still sample."""
    if isinstance(value, torch.Tensor):
        strides = value.stride() if value.layout == torch.strided else None
        return kind_of(value), value.shape, strides
    if isinstance(value, (list, tuple)):
        return type(value), tuple([concrete_of(item) for item in value])
    if isinstance(value, dict):
        return tuple([(key, concrete_of(item)) for key, item in value.items()])
    concrete: Hashable = repr(value) if isinstance(value, _SCALARS) else _spelled(value)
    return type(value).__name__, concrete


def _spelled(value: Any) -> Hashable:
    """Another value as its signature spells it (an object by its type only)."""
    if value is None or value is Ellipsis or type(value) in _NAMED:
        return value
    if isinstance(value, (torch.memory_format, slice)):
        return repr(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return str(value.dtype), value.shape
    from_numpy = _numpy_value(value)
    return None if from_numpy is None else repr(from_numpy)


def values_key(value: Any) -> str:
    """A short hash of the values of ``value``'s small tensors (up to ``MAX_ELEMENTS``
    each: hashing a large one at every call would cost as much as the call), and of its
    other values: two calls of one signature with other values are two samples."""
    digest = hashlib.blake2b(digest_size=8)
    _hash_into(digest, value)
    return digest.hexdigest()


def _hash_into(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() <= MAX_ELEMENTS and _unreadable(value) is None:
            digest.update(tensor_bytes(value))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _hash_into(digest, item)
    elif isinstance(value, dict):
        for key, item in value.items():
            digest.update(str(key).encode())
            _hash_into(digest, item)
    elif isinstance(value, _SCALARS) or value is None:
        digest.update(repr(value).encode())
    else:
        from_numpy = _numpy_value(value)
        _hash_into(digest, repr(value) if from_numpy is None else from_numpy)


class ValueStore:
    """Appends tensors' bytes to a values file, up to a total budget, whatever their size;
    bytes already in the file are referenced, not written again (a weight passed to many
    calls is kept once). ``used``: the bytes the file holds already (a replay child that
    takes over from one that died)."""

    def __init__(self, stream: BinaryIO, budget: int = VALUES_BUDGET, used: int = 0) -> None:
        self._stream = stream
        self.budget = budget
        self.used = used
        self._kept: dict[bytes, dict[str, int]] = {}  # the bytes' hash -> where they lie

    def keep(self, tensor: torch.Tensor, why_not: list[str]) -> dict[str, Any]:
        encoded = tensor_meta(tensor)
        reason = _unreadable(tensor)
        if reason is None:
            raw = tensor_bytes(tensor)
            digest = hashlib.blake2b(raw, digest_size=16).digest()
            known = self._kept.get(digest)
            if known is not None:
                encoded["data"] = dict(known)
            elif self.used + len(raw) > self.budget:
                reason = f"values budget of {self.budget} bytes spent"
            else:
                encoded["data"] = {"offset": self.used, "length": len(raw)}
                self._kept[digest] = dict(encoded["data"])
                self._stream.write(raw)
                self.used += len(raw)
        if reason is not None:
            why_not.append(reason)
        return encoded


def fingerprint(tensor: torch.Tensor) -> dict[str, Any] | None:
    """A tensor's values in three numbers (float64 sum, sum of magnitudes, non-finite count):
    enough to see a replay compute something else than the recorded call, loose enough that
    another summation order does not; None when its values cannot be read. Sums accumulate
    in float64 without a float64 copy, so a large output costs no more than its own size."""
    if _unreadable(tensor) is not None:
        return None
    if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
        return None  # reading values back would break the CUDA graph being captured
    try:
        values = tensor.detach()
        if values.is_complex():
            values = torch.view_as_real(values)
        if values.dtype == torch.bool:
            values = values.to(torch.uint8)
        finite = torch.isfinite(values)
        nonfinite = finite.numel() - int(finite.sum())
        if nonfinite:
            values = torch.where(finite, values, torch.zeros_like(values))
        return {
            "sum": float(values.sum(dtype=torch.float64)),
            "abs": float(values.abs().sum(dtype=torch.float64)),
            "nonfinite": nonfinite,
        }
    except (RuntimeError, TypeError, NotImplementedError):
        return None


def outcome_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """A recorded call's output tensor: its description and its values' fingerprint."""
    return {**tensor_meta(tensor), "fingerprint": fingerprint(tensor)}


def _dense_values(tensor: torch.Tensor) -> torch.Tensor:
    """The values of a sparse tensor (dense) or a quantized one (dequantized, as
    ``assert_close`` compares them); any other tensor itself."""
    try:
        if tensor.is_quantized:
            return tensor.dequantize()
        if tensor.layout != torch.strided and type(tensor) is torch.Tensor:
            return tensor.to_dense()
    except (RuntimeError, NotImplementedError):
        pass  # left unreadable: compared by metadata
    return tensor


def output_tensor(
    tensor: torch.Tensor, inputs: dict[int, int], store: ValueStore
) -> dict[str, Any]:
    """A replay's output tensor: its description, its values (inline when small, else in
    ``store``'s file), and which positional argument's storage it shares (``inputs``:
    storage address -> index)."""
    encoded = outcome_tensor(tensor)
    values = _dense_values(tensor)
    why_not: list[str] = []
    if values.numel() <= MAX_ELEMENTS and _unreadable(values) is None:
        encoded["data"] = {"b64": base64.b64encode(tensor_bytes(values)).decode("ascii")}
    else:
        encoded["data"] = store.keep(values, why_not)["data"]
    if why_not:  # compared by its fingerprint, or metadata, only; the reason is counted
        encoded["why_no_data"] = why_not[0]
    elif values is not tensor:  # the values are those of another dtype or layout
        encoded["data"]["dtype"] = str(values.dtype)
    try:
        address = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        address = 0
    encoded["alias_of"] = inputs.get(address) if address else None
    return encoded


def _by_name(text: str) -> Any:
    value = getattr(torch, text.rpartition(".")[2], None)
    if value is None:
        raise NotReplayable(f"torch has no {text}")
    return value


def rebuild(encoded: dict[str, Any], values: Values) -> Any:
    """The value an encoding describes, tensors filled from ``values`` (``values.bin``)."""
    kind = encoded["t"]
    if encoded.get("numpy"):
        return _rebuild_numpy(encoded, values)
    if kind == "tensor":
        return _rebuild_tensor(encoded, values)
    if kind == "none":
        return None
    if kind == "scalar":
        return _rebuild_scalar(encoded)
    if kind == "seq":
        items = [rebuild(item, values) for item in encoded["items"]]
        return items if encoded["kind"] == "list" else tuple(items)
    if kind in ("dtype", "layout", "memory_format"):
        return _by_name(encoded["v"])
    if kind == "device":
        return torch.device(encoded["v"])
    if kind == "slice":
        return slice(*(rebuild(encoded[k], values) for k in ("start", "stop", "step")))
    if kind == "ellipsis":
        return Ellipsis
    raise NotReplayable(f"argument of type {encoded.get('type', kind)}")


def _rebuild_numpy(encoded: dict[str, Any], values: Values) -> Any:
    """A numpy array or scalar the recorded call was given, as numpy's again."""
    try:
        import numpy
    except ImportError as missing:
        raise NotReplayable("a numpy value, and numpy is not installed here") from missing
    plain = {key: item for key, item in encoded.items() if key != "numpy"}
    if encoded["t"] == "tensor":
        return _rebuild_tensor(plain, values).numpy()
    return getattr(numpy, encoded["numpy"])(_rebuild_scalar(plain))


def _rebuild_scalar(encoded: dict[str, Any]) -> Any:
    kind, value = encoded.get("type"), encoded["v"]
    if kind == "float":
        return float(value)
    if kind == "complex":
        return complex(value[0], value[1])
    return value


def _rebuild_tensor(encoded: dict[str, Any], values: Values) -> torch.Tensor:
    data = encoded["data"]
    if data is None:
        raise NotReplayable("a tensor whose values were not kept")
    dtype = _by_name(encoded["dtype"])
    raw = values[data["offset"] : data["offset"] + data["length"]]
    shape = tuple(encoded["shape"])
    stride = tuple(encoded["stride"])
    flat = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape) if raw else None
    if flat is not None and 0 in stride:  # an expanded tensor: rebuilt expanded again
        index = tuple(slice(0, 1) if step == 0 else slice(None) for step in stride)
        result = flat[index].contiguous().expand(shape)
    else:
        result = torch.empty_strided(shape, stride, dtype=dtype)
        if flat is not None:
            result.copy_(flat)
    result = result.to(encoded["device"])
    if encoded["requires_grad"]:
        result.requires_grad_(True)
    return result
