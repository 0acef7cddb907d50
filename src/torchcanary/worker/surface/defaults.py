"""Configuration defaults: torch's config modules (nested keys included), plain ``config.py``
modules, ``torch.backends.*`` flags and torch's process-wide getters."""

from __future__ import annotations

import ast
import inspect
import re
import types
from pathlib import Path
from typing import Any

from torchcanary.worker.surface.imports import guarded_import
from torchcanary.worker.surface.normalise import Normaliser, is_plain_setting

_GETTER = re.compile(r"^(get_\w+|is_\w+_enabled|are_\w+_enabled)$")
_UNSAFE_GETTERS = ("rng", "state", "file_path", "device_module", "get_device")


def _machinery_defaults(module: Any, norm: Normaliser) -> dict[str, Any] | None:
    entries = getattr(module, "_config", None)
    if not isinstance(entries, dict):
        return None
    defaults = {}
    for key, entry in entries.items():
        if getattr(entry, "hide", False):
            continue
        alias = getattr(entry, "alias", None)
        defaults[key] = f"<alias of {alias}>" if alias else norm.value(entry.default)
    return defaults


def _plain_defaults(module: Any, norm: Normaliser) -> dict[str, Any]:
    return {
        name: norm.value(value)
        for name, value in sorted(vars(module).items())
        if not name.startswith("_") and not name.isupper() and is_plain_setting(value)
    }


def _getattr_names(cls: type) -> list[str]:
    """Attribute names a ``__getattr__`` answers, read from the string constants it compares
    ``name`` against (how torch.backends.cuda.matmul exposes its flags)."""
    try:
        tree = ast.parse(inspect.getsource(cls.__getattr__).strip())  # type: ignore[attr-defined]
    except (OSError, TypeError, SyntaxError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    names.append(side.value)
    return sorted(set(names))


def _flag_names(obj: Any) -> list[str]:
    # A module replaced by a PropModule keeps its flags on its class and the rest on the
    # wrapped module (``.m``); ``dir`` of a module instance shows neither.
    names = set(dir(obj))
    if type(obj) is not types.ModuleType:
        names.update(dir(type(obj)))
    wrapped = vars(obj).get("m") if hasattr(obj, "__dict__") else None
    if isinstance(wrapped, types.ModuleType):
        names.update(dir(wrapped))
    if "__getattr__" in vars(type(obj)):
        names.update(_getattr_names(type(obj)))
    return sorted(n for n in names if not n.startswith("_") and n != "TYPE_CHECKING")


def _backend_flags(
    prefix: str, obj: Any, norm: Normaliser, out: dict[str, Any], depth: int = 0
) -> None:
    """Readable flags of a torch.backends module, and of flag holders inside it."""
    for name in _flag_names(obj):
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if isinstance(value, types.ModuleType | type) or callable(value):
            continue
        if is_plain_setting(value):
            out[f"{prefix}.{name}"] = norm.value(value)
        elif depth < 2 and type(value).__module__.startswith("torch.backends"):
            _backend_flags(f"{prefix}.{name}", value, norm, out, depth + 1)


def _global_flags(torch: Any, norm: Normaliser) -> dict[str, Any]:
    """torch's own process-wide switches, read through its zero-argument getters."""
    flags = {}
    for name in sorted(dir(torch)):
        if not _GETTER.match(name) or any(word in name for word in _UNSAFE_GETTERS):
            continue
        try:
            value = getattr(torch, name)()
        except Exception:
            continue
        if isinstance(value, torch.dtype | torch.device):
            value = str(value)
        if is_plain_setting(value):
            flags[f"torch.{name}()"] = norm.value(value)
    return flags


def config_defaults(
    torch: Any,
    torch_dir: Path,
    machinery: list[str],
    plain: list[str],
    norm: Normaliser,
    failures: dict[str, str],
) -> dict[str, dict[str, Any]]:
    modules: dict[str, dict[str, Any]] = {}
    for name in machinery:
        module = guarded_import(name, failures)
        if module is not None:
            defaults = _machinery_defaults(module, norm)
            modules[name] = defaults if defaults is not None else _plain_defaults(module, norm)
    for name in plain:
        module = guarded_import(name, failures)
        if module is not None and not isinstance(getattr(module, "_config", None), dict):
            modules[name] = _plain_defaults(module, norm)
    backends: dict[str, Any] = {}
    for child in sorted((torch_dir / "backends").iterdir()):
        if child.name.startswith("_") or not (child.suffix == ".py" or child.is_dir()):
            continue
        name = f"torch.backends.{child.stem}"
        module = guarded_import(name, failures)
        if module is not None:
            _backend_flags(name, module, norm, backends)
    modules["torch.backends"] = backends
    modules["torch"] = _global_flags(torch, norm)
    return {name: modules[name] for name in sorted(modules)}
