"""Reads a build's surface from inside its environment: config defaults, public API, env vars.

Release notes say what people chose to write down; the build itself holds every default,
signature and environment variable. This worker call collects them as plain, normalised
JSON (see ``normalise``) so the orchestrator can diff two builds without importing either.
Standard library and torch only; every import is guarded (a module that fails is recorded,
not fatal) and the collection takes on no new namespace once ``budget_s`` is spent.

One module per part: ``sources`` (config modules and env vars, from the package's source
text), ``defaults`` (configuration), ``api`` (public names and signatures), ``build``
(library versions), ``normalise``; ``collect`` here is the worker call.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torchcanary.worker.surface.api import (
    TENSOR_NAMESPACE,
    api_namespaces,
    namespace_api,
    tensor_api,
)
from torchcanary.worker.surface.build import build_facts
from torchcanary.worker.surface.defaults import config_defaults
from torchcanary.worker.surface.imports import guarded_import
from torchcanary.worker.surface.normalise import Normaliser
from torchcanary.worker.surface.sources import scan_sources

SCHEMA_VERSION = 1


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
    norm = Normaliser(torch_dir, torch.__version__)
    failures: dict[str, str] = {}
    mark = lap("import_torch", started)
    machinery, plain, env_vars = scan_sources(torch_dir)
    mark = lap("scan_sources", mark)
    config = config_defaults(torch, torch_dir, machinery, plain, norm, failures)
    mark = lap("config", mark)
    api: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for namespace in namespaces or api_namespaces(torch):
        if time.monotonic() - started > budget_s:
            skipped.append(namespace)
            continue
        module = guarded_import(namespace, failures)
        if module is not None:
            api[namespace] = namespace_api(namespace, module, norm)
    if time.monotonic() - started <= budget_s:
        api[TENSOR_NAMESPACE] = tensor_api(torch, norm)
    else:
        skipped.append(TENSOR_NAMESPACE)
    mark = lap("api", mark)
    build = build_facts(torch)
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
