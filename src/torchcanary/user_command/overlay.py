"""A per-run overlay environment on top of a cached torch environment, for the user's project.

Installing the user's project into the cached torch environment would leave it there for
every later run of every project. Instead each role gets a fresh child venv (no pip, no
copy of torch) whose site-packages holds a ``.pth`` line calling ``site.addsitedir`` on the
cached environment's site-packages: torch and its dependencies are shared, read-only in
effect, while ``pip install`` writes only into the child, since pip installs into its own
prefix and refuses to uninstall what lies outside it. A constraint pins torch to the
cached version, so requirements that would replace torch fail to install with pip's own
message instead of silently testing another torch; a check after the install confirms
torch still comes from the cached environment. pip runs with the user's own configuration.

The base environment's console scripts (``torchrun``, ``torchfrtrace``, ``pip``) get a copy
in the overlay's ``bin`` that starts the overlay's interpreter, as in a venv the user built
themselves: ``torchrun`` spawns its workers with its own interpreter, and only the overlay's
sees the user's project. A script the install puts in the overlay replaces its copy.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torchcanary.envs.scripts import console_scripts, header, write_atomically
from torchcanary.user_command.records import InstallOutcome
from torchcanary.user_command.session import run_command

_SITE_PATHS = (
    "import json, sysconfig; "
    "print(json.dumps(sorted({sysconfig.get_paths()['purelib'], "
    "sysconfig.get_paths()['platlib']})))"
)
_TORCH_DIST = (
    "import importlib.metadata as m, json; d = m.distribution('torch'); "
    "print(json.dumps([d.version, str(d.locate_file(''))]))"
)


class OverlayError(Exception):
    """The overlay venv itself could not be made (the base interpreter is unusable)."""


@dataclass(frozen=True)
class Overlay:
    role: str
    path: Path
    python: str
    base_path: Path
    base_sites: tuple[str, ...]

    @property
    def bin_dirs(self) -> tuple[str, ...]:
        return str(self.path / "bin"), str(self.base_path / "bin")


def _json_out(python: str, code: str) -> list[str]:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise OverlayError(f"{python} failed: {out.stderr.strip()[-300:]}")
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def create_overlay(role: str, base_python: str, base_path: str, target: Path) -> Overlay:
    """A fresh child venv at ``target`` that sees the base environment's packages."""
    if target.exists():
        raise OverlayError(f"{target} already exists")
    made = subprocess.run(
        [base_python, "-m", "venv", "--without-pip", str(target)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if made.returncode != 0:
        raise OverlayError(f"cannot create a venv with {base_python}: {made.stderr.strip()[-300:]}")
    python = str(target / "bin" / "python")
    base_sites = tuple(_json_out(base_python, _SITE_PATHS))
    own_sites = _json_out(python, _SITE_PATHS)
    lines = "".join(f"import site; site.addsitedir({site!r})\n" for site in base_sites)
    (Path(own_sites[0]) / "_torchcanary_base.pth").write_text(lines)
    _bind_base_scripts(Path(base_path) / "bin", target / "bin", python)
    return Overlay(role, target, python, Path(base_path), base_sites)


def _bind_base_scripts(base_bin: Path, own_bin: Path, python: str) -> None:
    """Copies of the base's Python console scripts, started by the overlay's ``python``."""
    for script in console_scripts(base_bin):
        target = own_bin / script.path.name
        if target.exists() or script.path.name.startswith(("python", "activate")):
            continue
        if Path(script.interpreter).exists() and not script.runs_under(base_bin):
            continue  # another interpreter's tool that happens to live there
        write_atomically(target, header(python) + script.body, 0o755)


def install(
    overlay: Overlay,
    packages: list[str],
    requirement_files: list[str],
    *,
    cwd: Path,
    timeout_s: float,
    log_path: Path,
    without_deps: Sequence[str] = (),
) -> InstallOutcome:
    """pip-install ``packages`` and ``-r`` files into the overlay, then ``without_deps``
    alone (projects whose pins were paired: envs/companions.py); torch must stay the
    base's."""
    requirements = [*packages, *(f"-r {name}" for name in requirement_files)]
    started = time.monotonic()

    installed = [*requirements, *without_deps]

    def failed(error: str) -> InstallOutcome:
        return InstallOutcome(False, installed, time.monotonic() - started, error, str(log_path))

    try:
        # The distribution's version, which can differ from torch.__version__ ("+cu130").
        torch_version, _ = _json_out(overlay.python, _TORCH_DIST)
    except (OverlayError, ValueError) as exc:
        return failed(f"torch is not importable through the overlay: {exc}")
    constraint = overlay.path / "torch-constraint.txt"
    constraint.write_text(f"torch=={torch_version}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The second step's log beside the first's: each run of pip starts its own file.
    no_deps_log = log_path.with_name(f"{log_path.stem}-no-deps{log_path.suffix}")
    steps = [([], requirements, log_path), (["--no-deps"], list(without_deps), no_deps_log)]
    for options, step, step_log in steps:
        if not step:
            continue
        args = [arg for requirement in step for arg in _split(requirement)]
        outcome = run_command(
            [
                overlay.python,
                "-m",
                "pip",
                "install",
                "--progress-bar",
                "off",
                *options,
                "-c",
                str(constraint),
                *args,
            ],
            cwd=cwd,
            env=env,
            timeout_s=timeout_s,
            log_path=step_log,
        )
        if not outcome.succeeded:
            return failed(
                _pip_reason(outcome.stdout_tail + outcome.stderr_tail, outcome.describe())
            )
    try:
        version, location = _json_out(overlay.python, _TORCH_DIST)
    except (OverlayError, ValueError) as exc:
        return failed(f"torch is not importable in the overlay after the install: {exc}")
    if not os.path.normpath(location).startswith(tuple(map(os.path.normpath, overlay.base_sites))):
        return failed(
            f"the requirements installed another torch ({version}) over "
            f"{torch_version}; drop torch from --with/--requirements"
        )
    return InstallOutcome(True, installed, time.monotonic() - started, "", str(log_path))


def _split(requirement: str) -> list[str]:
    """``-e .`` and ``-r file`` are pip options with a value; a requirement stays whole."""
    return shlex.split(requirement) if requirement.startswith("-") else [requirement]


def _pip_reason(output: str, how: str) -> str:
    """pip's own ERROR lines, or its last line: the sentence that says what went wrong."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    conflict = [line for line in lines if "requested" in line and "torch" in line]
    reason = " ".join((errors or lines[-1:])[:2])[:400] or how
    if conflict:
        reason += " (" + "; ".join(conflict[:2])[:200] + ")"
    return f"pip install {how}: {reason}"
