"""The fault-free run of a user's job, kept on disk and reused by later runs.

Orchestrator side. A drill compares the job with its own fault-free run in the same
environment; making that run costs as long as the job itself, every time. It only depends
on what is named in its key, so it is kept under the torchcanary cache
(``<cache>/drill-references/<key>.json``, a :class:`kept.KeptFolder`) and reused
while nothing in the key changes:

- the environment (its folder, interpreter, torch version and spec);
- the job's command and arguments as written (``{scratch}`` unreplaced, so it is the same
  for every run), the directory it starts in and the variables it is given;
- the content of the job's files: the script (or the ``-m`` module found from its
  directory), every argument that names a file, and the source files of each local
  project in ``job_with``; a changed line in any of them makes a new reference;
- the ranks, the step pattern and the tolerance the comparison uses, and this cache's
  format version and torchcanary's.

Only a fault-free run that finished cleanly is kept: a failing one is the user's to fix,
and a later run must see the fix. ``--fresh-reference`` makes it again on purpose and
replaces it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchcanary.kept import KeptFolder, entry_key

CACHE_SCHEMA = 1


def reference_key(ingredients: dict[str, Any]) -> str:
    """The key of a fault-free run made from ``ingredients`` (JSON-able, order-free)."""
    return entry_key(CACHE_SCHEMA, ingredients)


def _finished(reference: Any) -> str | None:
    if not isinstance(reference, dict) or reference.get("ok") is not True:
        return "it holds no finished fault-free run"
    return None


class KeptReferences:
    """The on-disk fault-free runs; ``warn`` hears about every entry it had to ignore."""

    def __init__(self, directory: Path, warn: Callable[[str], None] = lambda message: None):
        self.entries = KeptFolder(directory, CACHE_SCHEMA, "the cached fault-free run", warn)
        self.directory = directory

    def path(self, key: str) -> Path:
        return self.entries.path(key)

    def load(self, key: str) -> dict[str, Any] | None:
        """The cached fault-free run for ``key``, marked as reused with its age; or None."""
        found = self.entries.load(key, _finished)
        if found is None:
            return None
        reference, made_at = found
        return {
            **reference,
            "cached": {
                "made_at": made_at,
                "age_s": max(time.time() - made_at, 0.0),
                "path": str(self.path(key)),
            },
        }

    def save(self, key: str, reference: dict[str, Any], ingredients: dict[str, Any]) -> None:
        """Keep a finished fault-free run; written whole or not at all."""
        if reference.get("ok") is not True:
            return
        kept = {k: v for k, v in reference.items() if k != "cached"}
        self.entries.save(key, kept, ingredients)
