"""The binary sanity pack, run for real through a worker in both torch environments.

Each check reads the installed build, so the verdicts below are what these two wheels
(2.13.0+cpu and 2.14.1+cu130, on a machine without a GPU) really are; a wrong pin must
be refuted, which shows the version check compares rather than reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchcanary.envs.cache import Environment
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.packs.discovery import discover_packs

pytestmark = pytest.mark.torch_envs

# The compile check is left to the end-to-end run: two cold Inductor compiles are minutes here.
FAST_CHECKS = {
    "sanity.version-pin": "confirmed",
    "sanity.build-variant": "confirmed",
    "sanity.cxx11-abi": "confirmed",
    "sanity.math-libraries": "confirmed",
    "sanity.numerics-vs-float64": "confirmed",
    "sanity.gloo-init": "confirmed",
    "sanity.nccl-init": "not-checkable-here",
    "sanity.cuda-errors-caught": "not-checkable-here",
}


def _sanity_probes() -> dict[str, Any]:
    (sanity,) = [item for item in discover_packs() if item.pack.name == "sanity"]
    return {pid: probe for pid, (probe, _) in sanity.probes.items()}


def _run(env: Environment, import_root: Path, probe_ids: list[str], pin: str) -> dict[str, Any]:
    """Each probe's outcome, all of them run in turn in one worker, as the claims section
    runs a pack's untimed probes."""
    probes = _sanity_probes()
    outcomes = {}
    worker = WorkerProcess(python=env.python, import_root=import_root)
    try:
        for probe_id in probe_ids:
            call = worker.call(
                "torchcanary.worker.run_probe:run_probe",
                {
                    "module": probes[probe_id].module,
                    "probe_id": probe_id,
                    "params": {"requested_torch": pin},
                },
                timeout_s=probes[probe_id].timeout_s + 30,
            )
            assert call.ok, (probe_id, call.error + call.stderr_tail[-2000:])
            outcomes[probe_id] = call.value
    finally:
        worker.close()
    return outcomes


def test_sanity_pack_runs_first_and_names_every_check_it_makes():
    packs = discover_packs()
    assert packs[0].pack.name == "sanity" and packs[0].pack.runs_first
    assert set(FAST_CHECKS) | {"sanity.compile-vs-eager"} == set(_sanity_probes())
    for probe in _sanity_probes().values():
        assert (probe.run.__doc__ or "").strip().startswith("Claim:"), probe.id


@pytest.mark.parametrize(("role", "pin"), [("baseline", "2.13.0"), ("candidate", "2.14.1")])
def test_each_sanity_check_gives_the_verdict_this_build_deserves(
    role, pin, baseline_env, candidate_env, import_root
):
    env = baseline_env if role == "baseline" else candidate_env
    outcomes = _run(env, import_root, list(FAST_CHECKS), pin)
    for probe_id, expected in FAST_CHECKS.items():
        outcome = outcomes[probe_id]
        assert outcome["verdict"] == expected, (probe_id, outcome["summary"])


def test_a_wheel_that_is_not_the_pinned_version_is_refuted(baseline_env, import_root):
    (outcome,) = _run(baseline_env, import_root, ["sanity.version-pin"], "2.14.1").values()
    assert outcome["verdict"] == "refuted"
    assert "2.13.0" in outcome["summary"]
