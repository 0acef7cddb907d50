"""Record named tensors in your own tests or scripts, so torchcanary can compare them.

Under ``torchcanary stack`` each environment gets its own directory (in
``TORCHCANARY_NUMERICS_DIR``); ``record("logits", out)`` writes the tensor there, and after
both runs torchcanary compares every name recorded in both, reporting silent numeric drift
between the torch versions::

    from torchcanary.numerics import record
    record("logits", model(batch))

Each tensor becomes ``<stem>.bin`` (its raw bytes in C order) and ``<stem>.json`` (name,
dtype, shape, byte order): no pickle, so the comparison side reads it without torch. The
last value recorded under a name wins. Outside a stack run the variable is unset and
``record`` does nothing but warn once, so the call can stay in a test suite for good.
This module runs inside the user's environment: standard library and torch only.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

DIR_VAR = "TORCHCANARY_NUMERICS_DIR"
RECORD_SCHEMA = 1
SUPPORTED_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)

_warned_unset = False


def record_stem(name: str) -> str:
    """A file name for ``name``: readable, and unique even when names differ only in symbols."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def record(name: str, tensor: Any) -> None:
    """Save ``tensor`` under ``name`` for torchcanary's cross-version comparison."""
    global _warned_unset
    directory = os.environ.get(DIR_VAR)
    if not directory:
        if not _warned_unset:
            _warned_unset = True
            warnings.warn(
                f"{DIR_VAR} is not set, so torchcanary.numerics.record() does "
                "nothing; it records only under `torchcanary stack`",
                RuntimeWarning,
                stacklevel=2,
            )
        return
    import torch

    if not isinstance(name, str) or not name:
        raise ValueError("record() needs a non-empty name such as 'logits'")
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"record({name!r}, ...) needs a torch.Tensor, got {type(tensor).__name__}")
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"record({name!r}, ...) cannot store {dtype}; it takes "
            f"{', '.join(SUPPORTED_DTYPES)} (convert first, e.g. .float())"
        )
    data = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous()
    nbytes = data.numel() * data.element_size()
    raw = ctypes.string_at(data.data_ptr(), nbytes) if nbytes else b""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    stem = record_stem(name)
    meta = {
        "schema": RECORD_SCHEMA,
        "name": name,
        "dtype": dtype,
        "shape": list(data.shape),
        "byteorder": sys.byteorder,
        "nbytes": nbytes,
        "file": f"{stem}.bin",
        "torch_version": str(torch.__version__),
    }
    # The .json is written last and atomically: its presence means the .bin is complete.
    _write_atomically(target / f"{stem}.bin", raw)
    _write_atomically(target / f"{stem}.json", json.dumps(meta).encode())


def _write_atomically(path: Path, content: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(content)
    os.replace(partial, path)
