"""A recorded call's encoded arguments (``worker/replay/encode.py``) as Python source that
rebuilds them with torch alone: small tensors as literals, larger ones from their bytes.

Runs on the orchestrator side, without torch: values are read with ``struct``.
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass, field
from typing import Any

# dtypes whose values ``struct`` reads; any other (bfloat16, complex, float8) is rebuilt
# from its bytes
_FORMATS = {
    "torch.float64": "d",
    "torch.float32": "f",
    "torch.float16": "e",
    "torch.int64": "q",
    "torch.int32": "i",
    "torch.int16": "h",
    "torch.int8": "b",
    "torch.uint8": "B",
    "torch.uint16": "H",
    "torch.uint32": "I",
    "torch.uint64": "Q",
    "torch.bool": "?",
}
MAX_LITERAL = 64  # elements written out as a list; more are rebuilt from their bytes


class NotWritable(Exception):
    """An argument a script cannot rebuild (an opaque object, a tensor not kept)."""


@dataclass
class Arguments:
    """The source of a call's arguments: the lines that define its tensors (``x0 = ...``),
    in order, and the expressions passed."""

    definitions: list[str] = field(default_factory=list)
    uses_base64: bool = False

    def value(self, encoded: Any) -> str:
        """The expression for one encoded value; a tensor is defined on a line of its own."""
        kind = encoded["t"]
        if kind == "tensor":
            name = f"x{len(self.definitions)}"
            self.definitions.append(f"{name} = {self._tensor(encoded)}")
            return name
        if kind == "none":
            return "None"
        if kind == "scalar":
            return _scalar(encoded)
        if kind == "seq":
            items = [self.value(item) for item in encoded["items"]]
            if encoded["kind"] == "list":
                return f"[{', '.join(items)}]"
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if kind in ("dtype", "layout", "memory_format"):
            return str(encoded["v"])
        if kind == "device":
            return f"torch.device({str(encoded['v'])!r})"
        if kind == "slice":
            parts = (self.value(encoded[key]) for key in ("start", "stop", "step"))
            return f"slice({', '.join(parts)})"
        if kind == "ellipsis":
            return "..."
        raise NotWritable(f"an argument of type {encoded.get('type', kind)}")

    def _tensor(self, encoded: dict[str, Any]) -> str:
        data = encoded.get("data")
        if not data or "b64" not in data:
            raise NotWritable("a tensor whose values were not kept")
        dtype, shape = str(encoded["dtype"]), list(encoded["shape"])
        raw = base64.b64decode(data["b64"])
        numel = math.prod(shape)
        if numel == 0:
            text = f"torch.empty({shape}, dtype={dtype})"
        elif numel <= MAX_LITERAL and dtype in _FORMATS and _finite(raw, dtype):
            values = struct.unpack(f"<{numel}{_FORMATS[dtype]}", raw)
            text = f"torch.tensor({_nested(values, shape)!r}, dtype={dtype})"
        else:
            self.uses_base64 = True
            encoded_bytes = base64.b64encode(raw).decode("ascii")
            text = (
                f'torch.frombuffer(bytearray(base64.b64decode("{encoded_bytes}")), '
                f"dtype={dtype}).reshape({shape})"
            )
        return _laid_out(text, encoded) + _placement(encoded)


def contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return list(reversed(strides))


def _laid_out(text: str, encoded: dict[str, Any]) -> str:
    """The values laid out with the recorded strides, as the replay rebuilds them: an
    expanded tensor (a zero stride) expanded again, any other copied into its strides."""
    shape, stride = list(encoded["shape"]), encoded.get("stride")
    if stride is None or stride == contiguous_strides(shape) or math.prod(shape) <= 1:
        return text
    if 0 in stride:
        index = ", ".join("0:1" if step == 0 else ":" for step in stride)
        return f"{text}[{index}].contiguous().expand({shape})"
    return f"torch.empty_strided({shape}, {stride}, dtype={encoded['dtype']}).copy_({text})"


def _placement(encoded: dict[str, Any]) -> str:
    device = str(encoded.get("device", "cpu"))
    moved = "" if device == "cpu" else f".to({device!r})"
    return moved + (".requires_grad_()" if encoded.get("requires_grad") else "")


def _finite(raw: bytes, dtype: str) -> bool:
    if _FORMATS[dtype] not in "dfe":
        return True
    count = len(raw) // struct.calcsize(_FORMATS[dtype])
    return all(math.isfinite(v) for v in struct.unpack(f"<{count}{_FORMATS[dtype]}", raw))


def _nested(values: tuple[Any, ...], shape: list[int]) -> Any:
    if not shape:
        return values[0]
    if len(shape) == 1:
        return list(values)
    step = len(values) // shape[0]
    return [_nested(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _scalar(encoded: dict[str, Any]) -> str:
    kind, value = encoded.get("type"), encoded["v"]
    if kind == "float" and isinstance(value, str):
        return f"float({value!r})"
    if kind == "complex":
        return repr(complex(value[0], value[1]))
    return repr(value)
