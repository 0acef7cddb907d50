"""The public API of the main namespaces and of ``Tensor``: each name's kind and signature
(parameter names, kinds and defaults; annotations are left out, since typing spellings
change without any change in behaviour) and ``__deprecated__`` markers."""

from __future__ import annotations

import inspect
import types
from typing import Any

from torchcanary.worker.surface.normalise import Normaliser, is_plain_setting

DEFAULT_NAMESPACES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.linalg",
    "torch.fft",
    "torch.special",
    "torch.autograd",
    "torch.optim",
    "torch.amp",
    "torch.func",
    "torch.distributed",
    "torch.export",
    "torch.compiler",
    "torch.cuda",
)
TENSOR_NAMESPACE = "torch.Tensor"
# Loaded torch.* modules that are not API namespaces: op registries that answer any name,
# flags (collected as config), version strings, test helpers.
_NOT_NAMESPACES = ("classes", "ops", "backends", "testing", "version", "torch_version")
_FOREIGN_MODULES = ("typing", "typing_extensions", "collections", "abc", "enum", "functools")

_PARAM_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional-or-keyword",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "keyword",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def _signature(obj: Any, norm: Normaliser) -> list[list[Any]] | None:
    """[[name, kind, default-or-None, has-default], ...], or None when unreadable."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return None
    params = []
    for param in signature.parameters.values():
        has_default = param.default is not inspect.Parameter.empty
        default = norm.value(param.default) if has_default else None
        params.append([param.name, _PARAM_KINDS[param.kind], default, has_default])
    return params


def _origin(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or isinstance(obj, types.ModuleType):
        module = type(obj).__module__
    return module or ""


def _describe(obj: Any, norm: Normaliser) -> dict[str, Any]:
    if isinstance(obj, type):
        kind = "class"
    elif callable(obj):
        kind = "function"
    else:
        kind = "value"
    entry: dict[str, Any] = {"kind": kind}
    if kind != "value":
        entry["signature"] = _signature(obj, norm)
    elif is_plain_setting(obj):
        entry["value"] = norm.value(obj)
    else:  # dtypes, devices, layouts: their str() is their identity
        entry["value"] = norm.text(str(obj))[:200] if _origin(obj).startswith("torch") else None
    deprecated = getattr(obj, "__deprecated__", None)
    if isinstance(deprecated, str):
        entry["deprecated"] = norm.text(deprecated)[:300]
    return entry


def namespace_api(namespace: str, module: Any, norm: Normaliser) -> dict[str, Any]:
    api = {}
    for name in sorted(dir(module)):
        if name.startswith("_") or name == "TYPE_CHECKING":
            continue
        try:
            obj = getattr(module, name)
        except Exception:
            continue
        if isinstance(obj, types.ModuleType):
            if obj.__name__ == f"{namespace}.{name}":
                api[name] = {"kind": "module"}
            continue  # a module imported for internal use is not this namespace's API
        origin = _origin(obj)
        if origin.split(".")[0] in _FOREIGN_MODULES and not origin.startswith("torch"):
            continue
        api[name] = _describe(obj, norm)
    return api


def api_namespaces(torch: Any) -> list[str]:
    """The main namespaces, then every other public ``torch.*`` module ``import torch``
    already loaded (so discovering them imports nothing new)."""
    loaded = sorted(
        value.__name__
        for name, value in vars(torch).items()
        if isinstance(value, types.ModuleType)
        and not name.startswith("_")
        and name not in _NOT_NAMESPACES
        and value.__name__ == f"torch.{name}"
    )
    return [*DEFAULT_NAMESPACES, *(n for n in loaded if n not in DEFAULT_NAMESPACES)]


def tensor_api(torch: Any, norm: Normaliser) -> dict[str, Any]:
    api = {}
    for name in sorted(dir(torch.Tensor)):
        if name.startswith("_"):
            continue
        try:
            attr = inspect.getattr_static(torch.Tensor, name)
        except AttributeError:
            continue
        if isinstance(attr, property) or type(attr).__name__ == "getset_descriptor":
            api[name] = {"kind": "property"}
        else:
            api[name] = _describe(getattr(torch.Tensor, name), norm)
    return api
