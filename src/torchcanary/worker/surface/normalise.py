"""Normalisation: a value that differs between two environments only in where they live or
how Python prints it must become the same JSON.

- paths under the environment (site-packages, prefix, home, temp) become ``<site>``,
  ``<prefix>``, ``<home>``, ``<tmp>``; a value that is torch's own version becomes
  ``<torch-version>``;
- ``at 0x...`` addresses in reprs are dropped; functions and classes are named by
  ``module.qualname``;
- sets are sorted; dict keys are sorted; non-finite floats become strings.
Standard library only.
"""

from __future__ import annotations

import enum
import math
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Normaliser:
    """Turns any Python value into JSON that is equal across environments when it means
    the same thing."""

    def __init__(self, torch_dir: Path, torch_version: str) -> None:
        # A value that is the torch version itself (torch.onnx.producer_version) is not news.
        self._versions = {torch_version, torch_version.split("+")[0]}
        prefixes = [
            (str(torch_dir.parent), "<site>"),
            (sys.prefix, "<prefix>"),
            (sys.base_prefix, "<base-prefix>"),
            (tempfile.gettempdir(), "<tmp>"),
            (str(Path.home()), "<home>"),
        ]
        # Longest first, so site-packages wins over the prefix that contains it.
        self._prefixes = sorted(
            ((p, label) for p, label in prefixes if p and p != "/"), key=lambda x: -len(x[0])
        )

    def text(self, value: str) -> str:
        if value in self._versions:
            return "<torch-version>"
        for prefix, label in self._prefixes:
            value = value.replace(prefix, label)
        return _ADDRESS.sub("", value)

    def value(self, value: Any, depth: int = 0) -> Any:
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else repr(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, enum.Enum):
            return f"{type(value).__name__}.{value.name}"
        if depth > 4:
            return self.text(repr(value))[:200]
        if isinstance(value, list | tuple):
            return [self.value(v, depth + 1) for v in value]
        if isinstance(value, set | frozenset):
            return sorted((self.value(v, depth + 1) for v in value), key=repr)
        if isinstance(value, dict):
            return {str(k): self.value(value[k], depth + 1) for k in sorted(value, key=repr)}
        if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
            return f"<{type(value).__name__} {_qualified(value)}>"
        return self.text(repr(value))[:300]


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}.{getattr(obj, '__qualname__', '?')}"


def is_plain_setting(value: Any) -> bool:
    if isinstance(value, bool | int | float | str) or value is None:
        return True
    if isinstance(value, list | tuple | set | frozenset):
        return all(is_plain_setting(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain_setting(v) for k, v in value.items())
    return False
