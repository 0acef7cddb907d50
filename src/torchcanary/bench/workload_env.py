"""The environments a run's workloads need: each cached torch environment plus the project.

The user's package is installed as the stack installs it (``user_command/overlay.py``): a
fresh per-run child venv on top of each cached environment, torch pinned to the cached one,
so the cache itself never holds a project. When ``with`` is empty the cached environments
are used as they are (a file target needs no install). Built once per run, before the first
worker group, and used by every bench worker so all benchmarks see the same interpreter.
"""

from __future__ import annotations

import dataclasses
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchcanary.envs import companions
from torchcanary.envs.cache import Environment
from torchcanary.user_command.overlay import OverlayError, create_overlay, install

_INSTALL_TIMEOUT_S = 900.0


def with_project(
    environments: dict[str, Environment],
    requirements: tuple[str, ...],
    cwd: str,
    work_dir: Path,
) -> tuple[dict[str, Environment], dict[str, str]]:
    """Each role's environment with ``requirements`` installed, and why a role failed."""
    if not requirements:
        return dict(environments), {}
    # Both installs at once: each mostly waits on pip's build isolation and the index.
    with ThreadPoolExecutor(max_workers=len(environments) or 1) as pool:
        made = dict(
            zip(
                environments,
                pool.map(
                    lambda item: _install_one(item[0], item[1], requirements, cwd, work_dir),
                    environments.items(),
                ),
                strict=True,
            )
        )
    ready = {role: env for role, (env, _error) in made.items() if env is not None}
    failures = {role: error for role, (env, error) in made.items() if env is None}
    return ready, failures


def _install_one(
    role: str, environment: Environment, requirements: tuple[str, ...], cwd: str, work_dir: Path
) -> tuple[Environment | None, str]:
    root = Path(work_dir) / "bench-overlay" / role
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        overlay = create_overlay(role, environment.python, environment.path, root / "venv")
    except (OverlayError, OSError) as exc:
        return None, f"cannot create an overlay of the {role} environment: {exc}"
    first, without_deps = companions.install_order(requirements, environment.companions, Path(cwd))
    outcome = install(
        overlay,
        first,
        [],
        cwd=Path(cwd),
        timeout_s=_INSTALL_TIMEOUT_S,
        log_path=root / "install.log",
        without_deps=without_deps,
    )
    if not outcome.ok:
        # The same words for every role, so a project broken everywhere reads as one reason.
        return None, (
            f"installing {' '.join(requirements)} failed: {outcome.error} "
            f"(log: {root.parent}/<role>/install.log)"
        )
    return dataclasses.replace(environment, python=overlay.python), ""
