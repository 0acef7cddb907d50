"""Each attempt's own copy of the folder a user's job starts in, and what a run left there.

Orchestrator side. A job run the way its authors run it writes into its working directory
(a checkpoint beside ``train.py`` is the common default). Started there, every attempt
after the first would resume from the state the first one left, and the baseline's and
the candidate's attempts, which run at the same time, would read each other's files. So
every attempt (each fault-free run, drill and trial, in each environment) starts in its
own mirror of the folder: the same tree, the files the job reads unchanged, and whatever
it writes kept in that attempt. The user's folder is only read.

What a mirror holds: every directory made anew; files up to ``COPY_LIMIT_BYTES`` copied
(with their times); larger files (data) and the folders in ``LINKED_FOLDERS`` (an
environment, a repository's history) linked, since copying them for every attempt would
cost more than the attempt; symbolic links as they were. A job that writes *into* a large
file or a linked folder in place still writes the user's copy; the report lists what the
fault-free run changed, so that shows. ``__pycache__`` folders, and the folder that holds
torchcanary's work folder (its output, ``canary-results`` by default), are left out.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COPY_LIMIT_BYTES = 4 * 2**20
LINKED_FOLDERS = frozenset(
    (".git", ".hg", ".venv", "venv", ".tox", "node_modules", ".mypy_cache", ".pytest_cache")
)
LEFT_OUT = frozenset(("__pycache__",))
LISTED_AT_MOST = 20  # files named in a report line; the count says the rest

# What a file looked like: its size and modification time (ns), as stat gives them.
FileState = tuple[int, int]


def in_attempt(attempt_root: Path) -> Path:
    """Where an attempt's mirror of the job's folder lies, in that attempt's own area."""
    return (attempt_root / "job").absolute()


def mirror(source: Path, target: Path) -> dict[str, FileState]:
    """Make ``target`` a mirror of ``source`` (see the module's docstring) and return
    what the mirror holds, for :func:`left_behind` after the attempt.

    A folder that holds ``target`` (torchcanary's work folder under the job's) is left out,
    so the mirror never copies itself."""
    target.mkdir(parents=True, exist_ok=True)
    inside = target.resolve()
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        path, copy = Path(entry.path), target / entry.name
        if entry.name in LEFT_OUT:
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(path), copy)
        elif entry.is_dir():
            if inside.is_relative_to(path.resolve()):
                continue
            if entry.name in LINKED_FOLDERS:
                os.symlink(path.resolve(), copy, target_is_directory=True)
            else:
                mirror(path, copy)
        elif entry.is_file():
            if entry.stat().st_size > COPY_LIMIT_BYTES:
                os.symlink(path.resolve(), copy)
            else:
                shutil.copy2(path, copy)
    return states(target)


def states(folder: Path) -> dict[str, FileState]:
    """Every file under ``folder`` (relative path -> size and mtime), links followed for
    files and not into folders (a linked folder is the user's, not the attempt's)."""
    found: dict[str, FileState] = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in files:
            path = Path(root, name)
            try:
                stat = path.stat()
            except OSError:  # a dangling link
                continue
            found[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return found


def left_behind(before: dict[str, FileState], folder: Path) -> dict[str, list[str]]:
    """The files a run created and changed in its mirror (``before``: as it was made)."""
    after = states(folder)
    return {
        "created": sorted(name for name in after if name not in before),
        "changed": sorted(
            name for name, state in after.items() if name in before and before[name] != state
        ),
    }


def describe(left: dict[str, list[str]]) -> str:
    """The files a run left in its folder, in words (empty when it left none)."""
    parts = []
    for kind in ("created", "changed"):
        names = left.get(kind) or []
        if names:
            shown = ", ".join(names[:LISTED_AT_MOST])
            more = f" and {len(names) - LISTED_AT_MOST} more" if len(names) > LISTED_AT_MOST else ""
            parts.append(f"{kind} {shown}{more}")
    return "; ".join(parts)
