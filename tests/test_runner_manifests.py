"""Both environments' manifests are collected at once and stored from the run's thread."""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import pytest

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
