"""Running a reproducer again, as its user would, in the run's two environments (reused
from the cache, ``envs/cache.py``): each ``python repro.py`` in a process of its own,
outside torchcanary (no ``PYTHONPATH``), both at once."""

from __future__ import annotations

import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchcanary.envs.worker_process import import_root_for
from torchcanary.repro.reproducer import ROLES, Reproducer, Reproduces, Verification, judge

TIMEOUT_S = 120.0  # one run of a script, per version
BOUND_MARGIN_S = 60.0  # beyond a script's own bound: starting it, and its ending


def run_script(
    python: str,
    script: Path,
    timeout_s: float,
    arguments: tuple[str, ...] = (),
    import_root: Path | None = None,
) -> tuple[int, str, str]:
    """``python script [arguments]`` in the script's folder: its exit (124 on a timeout),
    stdout and stderr. Nothing of torchcanary's is importable but ``import_root``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    if import_root is not None:
        env["PYTHONPATH"] = str(import_root)
    try:
        done = subprocess.run(
            [python, script.name, *arguments],
            cwd=script.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = _text(expired.stderr) + f"\n(timed out after {timeout_s:g} s)"
        return 124, _text(expired.stdout), stderr
    return done.returncode, done.stdout, done.stderr


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def verify(
    reproducer: Reproducer, script: Path, pythons: dict[str, str], timeout_s: float = TIMEOUT_S
) -> Verification:
    """Run ``script`` under each version's interpreter (the reproducer's own where it
    names one) and judge what they printed; not checked when an interpreter or folder the
    script needs from the run is gone."""
    gone = [p for p in (*reproducer.pythons.values(), *reproducer.paths) if not Path(p).exists()]
    if gone:
        reason = f"what the run used is gone: {', '.join(gone)}"
        return Verification(Reproduces.NOT_CHECKED, {}, reason)
    pythons = {**pythons, **reproducer.pythons}
    timeout_s = max(timeout_s, reproducer.bound_s + BOUND_MARGIN_S)
    missing = [role for role in ROLES if role not in pythons]
    if missing:
        reason = f"no {' or '.join(missing)} environment to run it in"
        return Verification(Reproduces.NOT_CHECKED, {}, reason)
    if reproducer.runs_both:  # it times both itself: run once, with both interpreters
        both = tuple(pythons[role] for role in ROLES)
        limit = timeout_s * len(ROLES)  # the time of one version's run for each version
        code, stdout, stderr = run_script(pythons["baseline"], script, limit, both)
        judged = judge(reproducer, {"both": stdout}, {"both": code})
        errors = {"both": stderr[-2000:]} if code != 0 else {}
        return Verification(judged.verdict, judged.outputs, judged.reason, errors)
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(len(ROLES)) as pool:
        root = (
            import_root_for(reproducer.importable, Path(scratch)) if reproducer.importable else None
        )
        runs = pool.map(lambda role: run_script(pythons[role], script, timeout_s, (), root), ROLES)
        ran = dict(zip(ROLES, runs, strict=True))
    outputs = {role: ran[role][1] for role in ROLES}
    exits = {role: ran[role][0] for role in ROLES}
    verification = judge(reproducer, outputs, exits)
    errors = {role: ran[role][2][-2000:] for role in ROLES if ran[role][0] != 0}
    return Verification(verification.verdict, outputs, verification.reason, errors)
