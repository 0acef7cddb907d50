"""Builds, verifies and reuses one virtual environment per (spec, Python).

A venv is built at the path it is used from, because pip and uv write that path into every
console script (``bin/torchrun``, ``bin/pip``); a venv built elsewhere and renamed keeps
scripts that start a missing interpreter. It counts as ready only once the marker file is
written, after it verified, so a half-built one is never reused; all of this happens under
a per-environment file lock, so concurrent runs wait for one build. A cached environment
whose console scripts point elsewhere (built by an older torchcanary in ``<key>.building``
and renamed, or moved) is repaired in place by rewriting their first lines, which costs
milliseconds where a rebuild costs gigabytes; one that still does not verify is rebuilt.
pip runs as the user configured it (pip.conf, PIP_* variables: mirrors, find-links), and uv
gets the same index settings translated into its flags. Either installer makes the same
environment (same venv, same versions, byte-compiled), so the cache key leaves it out;
uv, a dependency of torchcanary, is the default because it builds the two default
environments in about half pip's time.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.envs.companions import Companion
from torchcanary.envs.scripts import relocate, stale_scripts
from torchcanary.envs.spec import EnvSpec
from torchcanary.errors import EnvBuildError

MARKER = "canary-env.json"
_VERIFY = (
    "import json, sys, torch; "
    "print(json.dumps({'torch': torch.__version__, 'python': sys.version.split()[0]}))"
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Environment:
    """A ready environment: the interpreter a worker runs under, and what built it."""

    role: str
    spec: EnvSpec
    python: str
    path: str
    torch_version: str
    reused: bool
    build_seconds: float
    # The torch family as this side has it: from its requirement set, and what the user's
    # command installs into its overlays (envs/companions.py).
    companions: tuple[Companion, ...] = ()


def cache_root() -> Path:
    configured = os.environ.get("TORCHCANARY_CACHE")
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("torchcanary"))


def _python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise EnvBuildError(f"interpreter {python} does not run: {out.stderr.strip()[-200:]}")
    return out.stdout.strip()


def verify(python: str, spec: EnvSpec) -> str | None:
    """The torch version if ``python`` imports torch and matches the spec's pin, else None."""
    try:
        out = subprocess.run([python, "-c", _VERIFY], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        torch_version = json.loads(out.stdout.strip().splitlines()[-1])["torch"]
    except (ValueError, IndexError, KeyError):
        return None
    for requirement in spec.requirements:
        pin = re.match(r"^torch==([^,;\s]+)$", requirement)
        if pin and torch_version.split("+")[0] != pin.group(1).split("+")[0]:
            return None
    return str(torch_version)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_settings() -> dict[str, list[str]]:
    """Index settings from pip's own configuration, for installers that do not read it."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    settings: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".")[-1]
        if name in ("index-url", "extra-index-url", "find-links", "constraint"):
            settings[name] = value.strip().strip("'\"").split()
    return settings


@functools.cache
def uv_binary() -> str | None:
    """uv from the package installed with torchcanary, else from PATH; None if neither.

    Cached, and first asked on the main thread (:func:`resolve_installer`): finding it reads
    ``sysconfig``, whose first read is not thread-safe (two builds asking at once failed).
    """
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def resolve_installer(installer: str) -> str:
    """``auto`` becomes uv where it can be found, else pip; the others stand."""
    if installer != "auto":
        return installer
    return "uv" if uv_binary() is not None else "pip"


def _install_commands(
    venv: Path, base_python: str, spec: EnvSpec, installer: str
) -> list[list[str]]:
    """The venv comes from the base interpreter either way, so it has pip (the stack and
    workload overlays install with it) and the same layout whichever installer fills it."""
    python = str(venv / "bin" / "python")
    make_venv = [base_python, "-m", "venv", str(venv)]
    if installer == "pip":
        return [
            make_venv,
            [python, "-m", "pip", "install", "--progress-bar", "off", *spec.requirements],
        ]
    uv = uv_binary()
    if uv is None:
        raise EnvBuildError(
            "--installer uv was given but uv is not installed: "
            "install it (pip install uv) or use --installer pip"
        )
    # pip's behaviour, which uv does not default to: the best version across every index
    # (uv's first-index rule picked older CUDA libraries for torch 2.14.1+cu130 here), and
    # byte-compiled modules (without them import_torch would time the compiler).
    flags = ["--compile-bytecode", "--index-strategy", "unsafe-best-match"]
    for name, values in _pip_settings().items():
        for value in values:
            flag = {
                "index-url": "--index-url",
                "extra-index-url": "--extra-index-url",
                "find-links": "--find-links",
                "constraint": "--constraint",
            }[name]
            flags += [flag, value]
    return [make_venv, [uv, "pip", "install", "--python", python, *flags, *spec.requirements]]


def _run_step(command: list[str], progress: Progress, log: Path) -> None:
    with open(log, "a") as log_file:
        log_file.write("$ " + " ".join(command) + "\n")
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        tail: list[str] = []
        for line in proc.stdout:
            log_file.write(line)
            tail = ([*tail, line.rstrip()])[-15:]
            if line.strip():
                progress(line.strip()[:120])
        code = proc.wait()
    if code != 0:
        reason = next((t for t in reversed(tail) if "error" in t.lower()), tail[-1] if tail else "")
        raise EnvBuildError(f"{' '.join(command[:4])}... failed: {reason}; full log: {log}")


def ensure_environment(
    role: str,
    spec: EnvSpec,
    *,
    installer: str = "auto",
    base_python: str | None = None,
    progress: Progress = lambda _: None,
) -> Environment:
    """A verified environment for ``spec``, built now or reused from the cache."""
    started = time.monotonic()
    if spec.kind in ("python", "current"):
        torch_version = verify(spec.python, spec)
        if torch_version is None:
            raise EnvBuildError(
                f"{spec.python} cannot import torch: install torch in it or "
                "give requirements such as 'torch==2.14.1' instead"
            )
        return Environment(
            role, spec, spec.python, str(Path(spec.python).parent.parent), torch_version, True, 0.0
        )
    base = base_python or sys.executable
    installer = resolve_installer(installer)
    key = spec.cache_key(_python_version(base))
    # Resolved: an environment reached through a linked folder (a cache whose envs/ links to a
    # shared one) keeps the one real path its scripts name; the link's path would have them
    # rewritten, and torch imported again to verify, at every run.
    envs_dir = (cache_root() / "envs").resolve()
    final = envs_dir / key
    with _locked(envs_dir / f"{key}.lock"):
        python = final / "bin" / "python"
        if (final / MARKER).is_file():
            torch_version = _reuse(final, spec, progress)
            if torch_version is not None:
                return Environment(role, spec, str(python), str(final), torch_version, True, 0.0)
            progress(f"cached environment {final} is broken; rebuilding")
        # Left behind by an older torchcanary, which built there and renamed.
        shutil.rmtree(envs_dir / f"{key}.building", ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        log = envs_dir / f"{key}.log"
        log.write_text("")
        try:
            torch_version = _build(final, base, spec, installer, progress, log)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)  # never leave a half-built venv
            raise
        _write_marker(
            final,
            {
                "spec": spec.text,
                "torch": torch_version,
                "installer": installer,
                "verified": {"torch": torch_version, "files": verified_files(final)},
            },
        )
    return Environment(
        role, spec, str(python), str(final), torch_version, False, time.monotonic() - started
    )


def _reuse(venv: Path, spec: EnvSpec, progress: Progress) -> str | None:
    """The torch version of a cached ``venv``, its console scripts repaired; None if broken.

    Importing torch to verify costs seconds per environment and run; the marker remembers
    the files that import depended on, and while they are unchanged the answer stands.
    """
    try:
        repaired = relocate(venv)
    except OSError as exc:  # a read-only cache: torch still works, its tools may not
        progress(f"cannot repair the console scripts of {venv}: {exc}")
        repaired = []
    if repaired:
        progress(f"repaired console scripts of {venv}: {', '.join(repaired)}")
    marker = _read_marker(venv)
    fingerprint = verified_files(venv)
    verified = marker.get("verified") or {}
    if not repaired and fingerprint and verified.get("files") == fingerprint:
        return str(verified["torch"])
    torch_version = verify(str(venv / "bin" / "python"), spec)
    if torch_version is not None and fingerprint:
        _write_marker(venv, marker | {"verified": {"torch": torch_version, "files": fingerprint}})
    return torch_version


def verified_files(venv: Path) -> list[list[Any]] | None:
    """Size and mtime of what ``import torch`` in ``venv`` rests on; None if any is missing.

    The interpreter (through its link), the venv's configuration, the site-packages folder
    (its mtime moves when a package is added or removed) and torch's own entry points and
    core library: an interrupted pip or a damaged install changes one of them.
    """
    site = sorted(venv.glob("lib/python*/site-packages"))
    if len(site) != 1:
        return None
    paths = [
        venv / "pyvenv.cfg",
        venv / "bin" / "python",
        site[0],
        site[0] / "torch" / "__init__.py",
        site[0] / "torch" / "version.py",
        *sorted((site[0] / "torch" / "lib").glob("libtorch*.so*")),
    ]
    files = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            return None
        files.append([str(path.relative_to(venv)), stat.st_size, stat.st_mtime_ns])
    return files


def _read_marker(venv: Path) -> dict[str, Any]:
    try:
        marker = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def _write_marker(venv: Path, content: dict[str, Any]) -> None:
    """Written beside and renamed: never half a marker, and never into a hard-linked copy's."""
    staged = venv / f"{MARKER}.tmp"
    staged.write_text(json.dumps(content))
    staged.replace(venv / MARKER)


def _build(
    venv: Path, base: str, spec: EnvSpec, installer: str, progress: Progress, log: Path
) -> str:
    """Install ``spec`` into a new ``venv`` at its final path; the torch version it imports."""
    for command in _install_commands(venv, base, spec, installer):
        _run_step(command, progress, log)
    torch_version = verify(str(venv / "bin" / "python"), spec)
    if torch_version is None:
        raise EnvBuildError(
            f"environment for {spec.text!r} installed but does not import "
            f"the requested torch; see {log}"
        )
    stale = stale_scripts(venv)
    if stale:
        raise EnvBuildError(
            f"environment for {spec.text!r} installed console scripts that start another "
            f"interpreter ({stale[0].path.name}: {stale[0].interpreter}); see {log}"
        )
    return torch_version
