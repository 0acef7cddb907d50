"""Reads a build's surface from inside its environment: config defaults, public API, env vars.

Release notes say what people chose to write down; the build itself holds every default,
signature and environment variable. This worker call collects them as plain, normalised
JSON so the orchestrator can diff two builds without importing either. Standard library
and torch only; every import is guarded (a module that fails is recorded, not fatal) and
the whole collection stops taking on new namespaces once ``budget_s`` is spent.

Normalisation, so that only real changes differ between two environments:
- paths under the environment (site-packages, prefix, home, temp) become ``<site>``,
  ``<prefix>``, ``<home>``, ``<tmp>``; a value that is torch's own version becomes
  ``<torch-version>``;
- ``at 0x...`` addresses in reprs are dropped; functions and classes are named by
  ``module.qualname``;
- sets are sorted; dict keys are sorted; non-finite floats become strings;
- annotations are left out of signatures (typing spellings change without any change in
  behaviour).
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import math
import re
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
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
# Modules that use torch's config machinery say so in their source; these never ship to users.
_CONFIG_MARKER = "install_config_module("
_SKIPPED_SOURCE_DIRS = ("testing", "_vendor", "include", "share", "lib", "bin")
_ENV_VAR = re.compile(
    r"""["']((?:PY)?TORCH[A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]|NCCL_[A-Z0-9_]*[A-Z0-9])["']"""
)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_GETTER = re.compile(r"^(get_\w+|is_\w+_enabled|are_\w+_enabled)$")
_UNSAFE_GETTERS = ("rng", "state", "file_path", "device_module", "get_device")
_FOREIGN_MODULES = ("typing", "typing_extensions", "collections", "abc", "enum", "functools")


class _Normaliser:
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


def _import(name: str, failures: dict[str, str]) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except BaseException as exc:  # a broken optional module is a finding, not a crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        failures[name] = f"{type(exc).__name__}: {exc}"[:300]
        return None


# -- sources: one pass over the package's .py files -------------------------------------


def _module_name(torch_dir: Path, path: Path) -> str:
    parts = path.relative_to(torch_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan_sources(torch_dir: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(config modules on torch's machinery, plain ``config.py`` modules, env var -> file)."""
    machinery: list[str] = []
    plain: list[str] = []
    env_vars: dict[str, str] = {}
    for path in sorted(torch_dir.rglob("*.py")):
        relative = path.relative_to(torch_dir)
        if relative.parts[0] in _SKIPPED_SOURCE_DIRS:
            continue
        try:
            source = path.read_text(errors="replace")
        except OSError:
            continue
        for match in _ENV_VAR.finditer(source):
            env_vars.setdefault(match.group(1), str(relative))
        name = _module_name(torch_dir, path)
        if _CONFIG_MARKER in source and not name.endswith("_config_module"):
            machinery.append(name)
        elif path.name == "config.py":
            plain.append(name)
    return machinery, plain, dict(sorted(env_vars.items()))


# -- configuration defaults --------------------------------------------------------------


def _machinery_defaults(module: Any, norm: _Normaliser) -> dict[str, Any] | None:
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


def _is_plain_setting(value: Any) -> bool:
    if isinstance(value, bool | int | float | str) or value is None:
        return True
    if isinstance(value, list | tuple | set | frozenset):
        return all(_is_plain_setting(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain_setting(v) for k, v in value.items())
    return False


def _plain_defaults(module: Any, norm: _Normaliser) -> dict[str, Any]:
    return {
        name: norm.value(value)
        for name, value in sorted(vars(module).items())
        if not name.startswith("_") and not name.isupper() and _is_plain_setting(value)
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
    prefix: str, obj: Any, norm: _Normaliser, out: dict[str, Any], depth: int = 0
) -> None:
    """Readable flags of a torch.backends module, and of flag holders inside it."""
    for name in _flag_names(obj):
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if isinstance(value, types.ModuleType | type) or callable(value):
            continue
        if _is_plain_setting(value):
            out[f"{prefix}.{name}"] = norm.value(value)
        elif depth < 2 and type(value).__module__.startswith("torch.backends"):
            _backend_flags(f"{prefix}.{name}", value, norm, out, depth + 1)


def _global_flags(torch: Any, norm: _Normaliser) -> dict[str, Any]:
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
        if _is_plain_setting(value):
            flags[f"torch.{name}()"] = norm.value(value)
    return flags


def _config_defaults(
    torch: Any,
    torch_dir: Path,
    machinery: list[str],
    plain: list[str],
    norm: _Normaliser,
    failures: dict[str, str],
) -> dict[str, dict[str, Any]]:
    modules: dict[str, dict[str, Any]] = {}
    for name in machinery:
        module = _import(name, failures)
        if module is not None:
            defaults = _machinery_defaults(module, norm)
            modules[name] = defaults if defaults is not None else _plain_defaults(module, norm)
    for name in plain:
        module = _import(name, failures)
        if module is not None and not isinstance(getattr(module, "_config", None), dict):
            modules[name] = _plain_defaults(module, norm)
    backends: dict[str, Any] = {}
    for child in sorted((torch_dir / "backends").iterdir()):
        if child.name.startswith("_") or not (child.suffix == ".py" or child.is_dir()):
            continue
        name = f"torch.backends.{child.stem}"
        module = _import(name, failures)
        if module is not None:
            _backend_flags(name, module, norm, backends)
    modules["torch.backends"] = backends
    modules["torch"] = _global_flags(torch, norm)
    return {name: modules[name] for name in sorted(modules)}


# -- public API ---------------------------------------------------------------------------

_PARAM_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional-or-keyword",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "keyword",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def _signature(obj: Any, norm: _Normaliser) -> list[list[Any]] | None:
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


def _describe(obj: Any, norm: _Normaliser) -> dict[str, Any]:
    if isinstance(obj, type):
        kind = "class"
    elif callable(obj):
        kind = "function"
    else:
        kind = "value"
    entry: dict[str, Any] = {"kind": kind}
    if kind != "value":
        entry["signature"] = _signature(obj, norm)
    elif _is_plain_setting(obj):
        entry["value"] = norm.value(obj)
    else:  # dtypes, devices, layouts: their str() is their identity
        entry["value"] = norm.text(str(obj))[:200] if _origin(obj).startswith("torch") else None
    deprecated = getattr(obj, "__deprecated__", None)
    if isinstance(deprecated, str):
        entry["deprecated"] = norm.text(deprecated)[:300]
    return entry


def _namespace_api(namespace: str, module: Any, norm: _Normaliser) -> dict[str, Any]:
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


def _tensor_api(torch: Any, norm: _Normaliser) -> dict[str, Any]:
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


# -- build facts --------------------------------------------------------------------------


def _build_facts(torch: Any) -> dict[str, Any]:
    """Library versions bundled with or required by the build, beyond the manifest."""
    facts: dict[str, Any] = {}
    show = torch.__config__.show()
    settings = re.search(r"Build settings:(.*)", show, re.S)
    if settings:
        for item in re.split(r",\s*(?=[A-Z_]+=)", settings.group(1).strip()):
            key, _, value = item.partition("=")
            if key.strip() in ("CUDA_VERSION", "CUDNN_VERSION", "CXX_COMPILER"):
                facts[f"build.{key.strip()}"] = value.strip()
    for label, getter in (
        ("cudnn", lambda: torch.backends.cudnn.version()),
        ("nccl", lambda: ".".join(map(str, torch.cuda.nccl.version()))),
        ("cusparselt", lambda: torch.backends.cusparselt.version()),
    ):
        try:
            value = getter()
        except Exception:
            continue
        if value is not None:
            facts[f"library.{label}"] = str(value)
    facts.update(_required_distributions())
    return dict(sorted(facts.items()))


def _required_distributions() -> dict[str, str]:
    """Installed versions of what the torch distribution requires (CUDA libraries, triton)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for requirement in requirements:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]
        try:
            found[f"requires.{name.lower()}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


# -- entry point --------------------------------------------------------------------------


def collect(namespaces: list[str] | None = None, budget_s: float = 50.0) -> dict[str, Any]:
    """Everything a surface diff compares, for this environment's torch (worker call)."""
    started = time.monotonic()
    timings: dict[str, float] = {}

    def lap(label: str, since: float) -> float:
        now = time.monotonic()
        timings[label] = round(now - since, 3)
        return now

    import torch

    torch_dir = Path(torch.__file__).parent
    norm = _Normaliser(torch_dir, torch.__version__)
    failures: dict[str, str] = {}
    mark = lap("import_torch", started)
    machinery, plain, env_vars = _scan_sources(torch_dir)
    mark = lap("scan_sources", mark)
    config = _config_defaults(torch, torch_dir, machinery, plain, norm, failures)
    mark = lap("config", mark)
    api: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for namespace in namespaces or api_namespaces(torch):
        if time.monotonic() - started > budget_s:
            skipped.append(namespace)
            continue
        module = _import(namespace, failures)
        if module is not None:
            api[namespace] = _namespace_api(namespace, module, norm)
    if time.monotonic() - started <= budget_s:
        api[TENSOR_NAMESPACE] = _tensor_api(torch, norm)
    else:
        skipped.append(TENSOR_NAMESPACE)
    mark = lap("api", mark)
    build = _build_facts(torch)
    lap("build", mark)
    timings["total"] = round(time.monotonic() - started, 3)
    return {
        "schema": SCHEMA_VERSION,
        "torch_version": torch.__version__,
        "config": config,
        "api": api,
        "env_vars": env_vars,
        "build": build,
        "import_failures": dict(sorted(failures.items())),
        "skipped_namespaces": skipped,
        "timings_s": timings,
    }
