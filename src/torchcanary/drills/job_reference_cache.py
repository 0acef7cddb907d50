"""The fault-free run of a user's job, kept on disk and reused by later runs.

Orchestrator side. A drill compares the job with its own fault-free run in the same
environment; making that run costs as long as the job itself, every time. It only depends
on what is named in its key, so it is kept under the torchcanary cache
(``<cache>/drill-references/<key>.json``) and reused while nothing in the key changes:

- the environment (its folder, interpreter, torch version and spec);
- the job's command and arguments as written (``{scratch}`` unreplaced, so it is the same
  for every run), the directory it starts in and the variables it is given;
- the content of the job's files: the script (or the ``-m`` module found from its
  directory), every argument that names a file, and the source files of each local
  project in ``job_with``; a changed line in any of them makes a new reference;
- the ranks, the step pattern and the tolerance the comparison uses, and this cache's
  format version and torchcanary's.

Only a fault-free run that finished cleanly is kept: a failing one is the user's to fix,
and a later run must see the fix. An entry that cannot be read or does not hold what it
should is ignored with a one-line warning and made again; ``--fresh-reference`` makes it
again on purpose and replaces it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torchcanary

CACHE_SCHEMA = 1
# A project folder's files that decide what a job does; data and build output are left out.
_SOURCE_SUFFIXES = frozenset(
    (".py", ".pyx", ".pxd", ".pyi", ".toml", ".cfg", ".ini", ".txt", ".yaml", ".yml", ".json")
)
_SKIPPED_DIRS = frozenset(("__pycache__", "build", "dist", "node_modules", "venv", "site-packages"))
_LARGE_FILE = 8 * 2**20  # larger files are known by size and modification time, not read


def reference_key(ingredients: dict[str, Any]) -> str:
    """The key of a fault-free run made from ``ingredients`` (JSON-able, order-free)."""
    text = json.dumps(
        {"schema": CACHE_SCHEMA, "torchcanary": torchcanary.__version__, **ingredients},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def files_digest(paths: Iterable[Path]) -> str:
    """One digest of the content of ``paths`` (files, or folders of source files)."""
    digest = hashlib.sha256()
    for path in sorted({p.resolve() for p in paths}):
        files = [path] if path.is_file() else sorted(_source_files(path))
        for file in files:
            digest.update(str(file).encode() + b"\0")
            digest.update(_file_digest(file).encode() + b"\n")
    return digest.hexdigest()


def _source_files(folder: Path) -> Iterable[Path]:
    for root, dirs, names in os.walk(folder):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
        ]
        for name in names:
            if Path(name).suffix in _SOURCE_SUFFIXES:
                yield Path(root) / name


def _file_digest(file: Path) -> str:
    try:
        info = file.stat()
        if info.st_size > _LARGE_FILE:
            return f"size {info.st_size} mtime {info.st_mtime_ns}"
        return hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError as exc:  # unreadable: a new digest whenever that changes
        return f"unreadable: {type(exc).__name__}"


@dataclass(frozen=True)
class ReferenceCache:
    """The on-disk fault-free runs; ``warn`` hears about every entry it had to ignore."""

    directory: Path
    warn: Callable[[str], None] = field(default=lambda message: None)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The cached fault-free run for ``key``, marked as reused with its age; or None."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
            reference, made_at = entry["reference"], float(entry["made_at"])
            if entry.get("schema") != CACHE_SCHEMA or entry.get("key") != key:
                raise ValueError("it was written for another key or format")
            if not isinstance(reference, dict) or reference.get("ok") is not True:
                raise ValueError("it holds no finished fault-free run")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.warn(
                f"ignoring the cached fault-free run {path} ({type(exc).__name__}: {exc}); "
                "making it again"
            )
            return None
        return {
            **reference,
            "cached": {
                "made_at": made_at,
                "age_s": max(time.time() - made_at, 0.0),
                "path": str(path),
            },
        }

    def save(self, key: str, reference: dict[str, Any], ingredients: dict[str, Any]) -> None:
        """Keep a finished fault-free run; written whole or not at all."""
        if reference.get("ok") is not True:
            return
        entry = {
            "schema": CACHE_SCHEMA,
            "key": key,
            "made_at": time.time(),
            "ingredients": ingredients,  # what the key was made of, for a reader of the file
            "reference": {k: v for k, v in reference.items() if k != "cached"},
        }
        path = self.path(key)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(entry, default=str))
            os.replace(partial, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink()
            self.warn(f"cannot keep the fault-free run in {self.directory}: {exc}")


def describe_age(age_s: float) -> str:
    """An age in the unit a person reads it in: 40 s, 12 min, 3.5 h, 2.0 days."""
    if age_s < 90:
        return f"{age_s:.0f} s"
    if age_s < 90 * 60:
        return f"{age_s / 60:.0f} min"
    if age_s < 48 * 3600:
        return f"{age_s / 3600:.1f} h"
    return f"{age_s / 86400:.1f} days"
