"""What the run does for both environments (prepare, collect manifests) it does at once."""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import pytest

from torchcanary.envs.prepare import prepare_environments
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.runner import record_manifests

pytestmark = pytest.mark.torch_envs


def _rendezvous_python(real: str, folder: Path, me: str, other: str) -> str:
    """An interpreter that starts only once the other one has started (or 30 s went by)."""
    script = folder / f"python-{me}"
    script.write_text(
        "#!/bin/sh\n"
        f"touch {folder}/{me}.started\n"
        "i=0\n"
        f"while [ ! -e {folder}/{other}.started ] && [ $i -lt 300 ]; do\n"
        "  sleep 0.1; i=$((i+1))\n"
        "done\n"
        f"[ -e {folder}/{other}.started ] || touch {folder}/{me}.waited-alone\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_manifests_of_both_environments_are_collected_at_once(make_context, tmp_path):
    ctx = make_context(sections=())
    for role, other in (("baseline", "candidate"), ("candidate", "baseline")):
        env = ctx.environments[role]
        python = _rendezvous_python(env.python, tmp_path, role, other)
        ctx.environments[role] = dataclasses.replace(env, python=python)
    record_manifests(ctx)
    assert not list(tmp_path.glob("*.waited-alone"))  # run one after the other, one would
    stored = ctx.store.environments(ctx.run_id)
    assert stored["baseline"].manifest.facts["torch_version"].startswith("2.13")
    assert stored["candidate"].manifest.facts["torch_version"].startswith("2.14")


def test_both_environments_are_prepared_at_once(baseline_env, candidate_env, tmp_path):
    plan = RunPlan(
        baseline="python:" + _rendezvous_python(baseline_env.python, tmp_path, "b", "c"),
        candidate="python:" + _rendezvous_python(candidate_env.python, tmp_path, "c", "b"),
    )
    environments = prepare_environments(plan, Progress(quiet=True))
    assert not list(tmp_path.glob("*.waited-alone"))
    assert environments["baseline"].torch_version.startswith("2.13")
    assert environments["candidate"].torch_version.startswith("2.14")
