"""Imports inside a target environment that fail as data, not as a crash of the worker."""

from __future__ import annotations

import importlib
import types


def guarded_import(name: str, failures: dict[str, str]) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except BaseException as exc:  # a broken optional module is a finding, not a crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        failures[name] = f"{type(exc).__name__}: {exc}"[:300]
        return None
