"""Results kept on disk under a key made of everything they depend on, and reused.

Orchestrator side. Some work gives the same answer as long as its inputs are the same: a
claim probe's verdict in an environment that cannot change (``claims/kept_verdicts.py``),
the bench's facts of an environment (``bench/kept_facts.py``), a diff's surfaces, a user
job's fault-free run (``drill/kept_references.py``). Each is kept in a :class:`KeptFolder`:
one JSON file per key under the torchcanary cache folder; the key is a digest of the
ingredients, which the file also holds so a reader can see what it was made of. An entry
is written whole or not at all, and one that cannot be read or fails its owner's check is
ignored with a one-line warning and made again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torchcanary

if TYPE_CHECKING:
    from torchcanary.envs.cache import Environment
    from torchcanary.results import Manifest

# A project folder's files that decide what code does; data and build output are left out.
_SOURCE_SUFFIXES = frozenset(
    (".py", ".pyx", ".pxd", ".pyi", ".toml", ".cfg", ".ini", ".txt", ".yaml", ".yml", ".json")
)
_SKIPPED_DIRS = frozenset(("__pycache__", "build", "dist", "node_modules", "venv", "site-packages"))
_LARGE_FILE = 8 * 2**20  # larger files are known by size and modification time, not read


def entry_key(schema: int, ingredients: dict[str, Any]) -> str:
    """The key of an entry made from ``ingredients`` (JSON-able, order-free) in a cache
    of format ``schema``; torchcanary's version is always an ingredient."""
    text = json.dumps(
        {"schema": schema, "torchcanary": torchcanary.__version__, **ingredients},
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


@functools.cache
def own_files_digest() -> str:
    """The content digest of torchcanary's own source files (once per process): the code
    that made a kept result, in the worker and out."""
    return files_digest([Path(torchcanary.__file__).parent])


def fixed_environment(
    environment: Environment, manifest: Manifest | None, profile: str = ""
) -> dict[str, Any] | None:
    """What names an environment that cannot change between runs, for a key; None for one
    that can.

    Only a requirement set torchcanary built is fixed (other requirements make another
    folder); an interpreter or ``current`` can have packages installed into it between
    runs. The manifest (torch build and configuration, Python, OS, CPU, GPUs) is part of
    the name, so the same folder on other hardware is another environment. On a fleet
    node the hardware profile is part of it too: a profile is the user's word that its
    machines differ from the others' in ways a manifest may not show (a feature, a link).
    """
    if environment.spec.kind != "requirements" or manifest is None:
        return None
    return {
        "spec": environment.spec.text,
        "path": environment.path,
        "python": environment.python,
        "manifest": manifest.to_json(),
        **({"profile": profile} if profile else {}),
    }


def fixed_environments(
    environments: dict[str, Environment], manifests: dict[str, Manifest], profile: str = ""
) -> dict[str, dict[str, Any] | None]:
    """:func:`fixed_environment` for each role, with the manifest this run collected there."""
    return {
        role: fixed_environment(env, manifests.get(role), profile)
        for role, env in environments.items()
    }


def describe_age(age_s: float) -> str:
    """An age in the unit a person reads it in: 40 s, 12 min, 3.5 h, 2.0 days."""
    if age_s < 90:
        return f"{age_s:.0f} s"
    if age_s < 90 * 60:
        return f"{age_s / 60:.0f} min"
    if age_s < 48 * 3600:
        return f"{age_s / 3600:.1f} h"
    return f"{age_s / 86400:.1f} days"


@dataclass(frozen=True)
class KeptFolder:
    """One folder of entries ``<key>.json``; ``warn`` hears about every entry it ignored.

    ``what`` names an entry in those warnings ("the cached fault-free run").
    """

    directory: Path
    schema: int
    what: str
    warn: Callable[[str], None] = field(default=lambda message: None)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(
        self, key: str, check: Callable[[Any], str | None] = lambda value: None
    ) -> tuple[Any, float] | None:
        """The value kept for ``key`` and when it was made, or None.

        ``check`` says what is wrong with a value that cannot be used (None: nothing).
        """
        path = self.path(key)
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
            value, made_at = entry["value"], float(entry["made_at"])
            if entry.get("schema") != self.schema or entry.get("key") != key:
                raise ValueError("it was written for another key or format")
            problem = check(value)
            if problem:
                raise ValueError(problem)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.warn(f"ignoring {self.what} {path} ({type(exc).__name__}: {exc}); making it again")
            return None
        return value, made_at

    def save(self, key: str, value: Any, ingredients: dict[str, Any]) -> None:
        """Keep ``value`` for ``key``; written whole or not at all."""
        entry = {
            "schema": self.schema,
            "key": key,
            "made_at": time.time(),
            "ingredients": ingredients,  # what the key was made of, for a reader of the file
            "value": value,
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
            self.warn(f"cannot keep {self.what} in {self.directory}: {exc}")
