"""The built-in claims catalogue, run for real in both torch environments.

Every built-in probe goes through a real worker process in the baseline (2.13.0) and the
candidate (2.14.1) environment, one worker per environment, the two environments in
parallel. The specific expectations below are what those builds actually do; where a
verdict hinges on whether an API exists, the test also asks the environment directly
(in a separate interpreter, without the probe's code) so a probe that answered from a
fixed script instead of the build would disagree with it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from torchcanary.envs.cache import Environment
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.probe_registry import discover
from torchcanary.probe_result import Verdict

# The 2.14 release notes, as the built-in pack ships them (the same text as the release's).
RELEASE_TEXT = Path(str(files("torchcanary.packs.builtin.pytorch_2_14") / "notes.txt"))

# One or more probes per claim of the release: the catalogue must keep covering them all.
CATALOGUE = {
    "nccl2.registered-in-tree",
    "nccl2.collective-contract",
    "nccl2.nonblocking-eager-split",
    "c10d.reconfigure-in-place",
    "c10d.rma-window",
    "c10d.flight-recorder-gloo",
    "nvgemm.autotune-backend",
    "nvgemm.epilogue-fusion",
    "nvgemm.scaled-fp8-nvfp4",
    "nvgemm.grouped-reduction",
    "mps.linalg-native",
    "mps.reductions",
    "mps.decode-linear-b1k",
    "mps.decode-gemv",
    "dynamic-spec.shared-across-frontends",
    "control-flow.torch-switch",
    "control-flow.while-loop-cudagraph",
    "platform.rocm-7.14",
    "platform.xpu-graph-capture",
    "platform.rubin-sm107",
    "inductor.simple-overlap-default",
    "inductor.locality-in-training-opt-in",
    "compile.complex-decomposition-opt-in",
}

# The hardware each device-bound probe names when that hardware is missing.
HARDWARE_WORDS = {
    "cuda": ("cuda", "nvidia"),
    "mps": ("mps",),
    "xpu": ("xpu",),
    "rocm": ("rocm", "amd"),
}
DEVICE_BOUND = {
    "nccl2.collective-contract": "cuda",
    "nccl2.nonblocking-eager-split": "cuda",
    "nvgemm.autotune-backend": "cuda",
    "nvgemm.epilogue-fusion": "cuda",
    "nvgemm.scaled-fp8-nvfp4": "cuda",
    "nvgemm.grouped-reduction": "cuda",
    "control-flow.while-loop-cudagraph": "cuda",
    "platform.rubin-sm107": "cuda",
    "mps.linalg-native": "mps",
    "mps.reductions": "mps",
    "mps.decode-linear-b1k": "mps",
    "mps.decode-gemv": "mps",
    "platform.xpu-graph-capture": "xpu",
    "platform.rocm-7.14": "rocm",
}

# Asked of each environment directly, in its own interpreter, independently of the probes.
_FACTS = """
import importlib, json, importlib.metadata as md
import torch, torch.distributed as dist, torch._higher_order_ops as hops
from torch._inductor import config as ic
spec = importlib.import_module("torch.fx.experimental.dynamic_spec")
print(json.dumps({
    "has_reconfigure": hasattr(dist, "_reconfigure"),
    "has_new_window": hasattr(dist, "_new_window"),
    "nccl2_entry_point": any(e.name == "nccl2"
                             for e in md.entry_points(group="torch.distributed.backends")),
    "has_torch_switch": hasattr(torch, "switch"),
    "has_internal_switch": callable(getattr(hops, "switch", None)),
    "has_dynamic_spec": callable(getattr(spec, "dynamic_spec", None)),
    "overlap_flag": getattr(ic.aten_distributed_optimizations, "enable_simple_overlap", None),
    "arch_list": torch.cuda.get_arch_list(),
}))
"""


def _probes() -> dict[str, Any]:
    return {pid: probe for pid, (probe, source) in discover().items() if source.plugin == "builtin"}


def _release_text() -> str:
    return " ".join(RELEASE_TEXT.read_text().split())


def test_discovery_finds_the_whole_catalogue_with_unique_ids() -> None:
    probes = _probes()
    assert set(probes) == CATALOGUE
    assert len({probe.id for probe in probes.values()}) == len(probes)


def test_every_probe_describes_its_claim_scope_and_how_it_decides() -> None:
    for probe_id, probe in _probes().items():
        assert probe.claim.strip() and probe.scope.strip(), probe_id
        assert probe.release_claim.strip(), probe_id
        assert probe.timeout_s > 0, probe_id
        assert (probe.run.__doc__ or "").strip().startswith("Claim:"), probe_id
        assert (sys.modules[probe.module].__doc__ or "").strip(), probe.module


def test_every_release_quote_is_really_in_the_release_text() -> None:
    text = _release_text()
    for probe_id, probe in _probes().items():
        for fragment in probe.release_claim.split("..."):
            fragment = " ".join(fragment.split()).strip(" .")
            assert not fragment or fragment in text, (probe_id, fragment)


def test_listing_the_probes_does_not_import_torch() -> None:
    check = (
        "import sys; from torchcanary.probe_registry import discover; discover(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"


def _run_catalogue(env: Environment, import_root: Path) -> dict[str, Any]:
    """Every probe through one real worker in ``env``, plus the env's own facts."""
    worker = WorkerProcess(python=env.python, import_root=import_root)
    try:
        devices = worker.call("torchcanary.worker.devices:available_devices", {}, 60)
        results = {}
        for probe_id, probe in sorted(_probes().items()):
            results[probe_id] = worker.call(
                "torchcanary.worker.run_probe:run_probe",
                {"module": probe.module, "probe_id": probe_id},
                timeout_s=probe.timeout_s + 30,
            )
    finally:
        worker.close()
    facts = subprocess.run(
        [env.python, "-c", _FACTS], capture_output=True, text=True, timeout=180, check=True
    )
    return {
        "devices": devices.value,
        "results": results,
        "facts": json.loads(facts.stdout.strip().splitlines()[-1]),
    }


@pytest.fixture(scope="module")
def catalogue_runs(
    baseline_env: Environment, candidate_env: Environment, import_root: Path
) -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        baseline = pool.submit(_run_catalogue, baseline_env, import_root)
        candidate = pool.submit(_run_catalogue, candidate_env, import_root)
        return {"baseline": baseline.result(), "candidate": candidate.result()}


def _outcome(runs: dict[str, dict[str, Any]], role: str, probe_id: str) -> dict[str, Any]:
    call = runs[role]["results"][probe_id]
    assert call.ok, f"{role} {probe_id}: {call.status} {call.error}\n{call.stderr_tail[-2000:]}"
    return call.value


ROLES = ("baseline", "candidate")


@pytest.mark.torch_envs
@pytest.mark.parametrize("role", ROLES)
def test_every_probe_ends_in_a_claim_verdict_never_a_harness_failure(
    catalogue_runs: dict[str, dict[str, Any]], role: str
) -> None:
    for probe_id in sorted(CATALOGUE):
        outcome = _outcome(catalogue_runs, role, probe_id)
        verdict = Verdict(outcome["verdict"])
        assert not verdict.is_failure_of_the_harness, (
            role,
            probe_id,
            outcome["summary"],
            outcome["evidence"],
        )
        assert outcome["summary"].strip(), (role, probe_id)


@pytest.mark.torch_envs
@pytest.mark.parametrize("role", ROLES)
def test_probes_for_absent_hardware_are_not_checkable_and_name_the_hardware(
    catalogue_runs: dict[str, dict[str, Any]], role: str
) -> None:
    devices = set(catalogue_runs[role]["devices"])
    for probe_id, device in DEVICE_BOUND.items():
        if device in devices:
            continue
        outcome = _outcome(catalogue_runs, role, probe_id)
        assert outcome["verdict"] == Verdict.NOT_CHECKABLE.value, (role, probe_id)
        assert outcome["summary"].startswith("not checked:"), outcome["summary"]
        assert any(word in outcome["summary"].lower() for word in HARDWARE_WORDS[device]), (
            probe_id,
            outcome["summary"],
        )


@pytest.mark.torch_envs
def test_reconfiguration_is_absent_in_baseline_and_works_on_live_gloo_in_candidate(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    for role in ROLES:
        has_api = catalogue_runs[role]["facts"]["has_reconfigure"]
        outcome = _outcome(catalogue_runs, role, "c10d.reconfigure-in-place")
        assert outcome["verdict"] == ("confirmed" if has_api else "absent"), role
    baseline = _outcome(catalogue_runs, "baseline", "c10d.reconfigure-in-place")
    assert baseline["verdict"] == "absent"
    assert "does not support shrinking" in baseline["evidence"]["shrink_group_on_gloo"]
    candidate = _outcome(catalogue_runs, "candidate", "c10d.reconfigure-in-place")
    assert candidate["verdict"] == "confirmed"
    ranks = candidate["evidence"]["ranks"]
    assert [r["after_regrow"]["size"] for r in ranks] == [3, 3, 3]
    assert [r["after_shrink"]["rank"] for r in ranks[:2]] == [1, 0]
    assert all(r["regrown_sum"] == [6.0] * 4 for r in ranks)


@pytest.mark.torch_envs
def test_windows_are_absent_in_baseline_and_declined_by_gloo_in_candidate(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    assert not catalogue_runs["baseline"]["facts"]["has_new_window"]
    assert _outcome(catalogue_runs, "baseline", "c10d.rma-window")["verdict"] == "absent"
    assert catalogue_runs["candidate"]["facts"]["has_new_window"]
    candidate = _outcome(catalogue_runs, "candidate", "c10d.rma-window")
    assert candidate["verdict"] == "not-checkable-here"
    assert "Backend gloo does not support new_window" in candidate["summary"]


@pytest.mark.torch_envs
@pytest.mark.parametrize("role", ROLES)
def test_flight_recorder_records_gloo_collectives_in_both_builds(
    catalogue_runs: dict[str, dict[str, Any]], role: str
) -> None:
    outcome = _outcome(catalogue_runs, role, "c10d.flight-recorder-gloo")
    assert outcome["verdict"] == "confirmed"
    assert outcome["evidence"]["names"][:4] == [
        "gloo:all_reduce",
        "gloo:broadcast",
        "gloo:all_gather",
        "gloo:barrier",
    ]


@pytest.mark.torch_envs
def test_nccl2_registers_in_candidate_only_and_needs_no_torchcomms(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    for role in ROLES:
        registered = catalogue_runs[role]["facts"]["nccl2_entry_point"]
        outcome = _outcome(catalogue_runs, role, "nccl2.registered-in-tree")
        assert outcome["verdict"] == ("confirmed" if registered else "absent"), role
    candidate = _outcome(catalogue_runs, "candidate", "nccl2.registered-in-tree")
    assert candidate["evidence"]["backend_class"] == "ProcessGroupNCCL2"
    assert candidate["evidence"]["torchcomms_installed"] is False
    baseline = _outcome(catalogue_runs, "baseline", "nccl2.registered-in-tree")
    assert "Unknown backend type nccl2" in baseline["evidence"]["failure"]


@pytest.mark.torch_envs
def test_dynamic_spec_is_shared_across_frontends_only_where_the_decorator_exists(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    for role in ROLES:
        present = catalogue_runs[role]["facts"]["has_dynamic_spec"]
        outcome = _outcome(catalogue_runs, role, "dynamic-spec.shared-across-frontends")
        assert outcome["verdict"] == ("confirmed" if present else "absent"), role
    candidate = _outcome(catalogue_runs, "candidate", "dynamic-spec.shared-across-frontends")
    results = candidate["evidence"]["results"]
    assert results["torch.compile"]["graphs"] == 1
    assert results["torch.export"]["placeholder_shapes"][0].startswith("torch.Size([u")


@pytest.mark.torch_envs
def test_torch_switch_is_absent_in_both_but_candidate_has_a_working_internal(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    for role in ROLES:
        assert not catalogue_runs[role]["facts"]["has_torch_switch"]
        outcome = _outcome(catalogue_runs, role, "control-flow.torch-switch")
        assert outcome["verdict"] == "absent"
        has_internal = catalogue_runs[role]["facts"]["has_internal_switch"]
        assert ("internal_behaviour" in outcome["evidence"]) == has_internal
    internal = _outcome(catalogue_runs, "candidate", "control-flow.torch-switch")["evidence"][
        "internal_behaviour"
    ]
    assert internal["ok"] and internal["compiled_graphs_for_three_indices"] == 1


@pytest.mark.torch_envs
def test_simple_overlap_interleaves_compute_in_candidate_not_in_baseline(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    baseline = _outcome(catalogue_runs, "baseline", "inductor.simple-overlap-default")
    assert catalogue_runs["baseline"]["facts"]["overlap_flag"] is None
    assert baseline["verdict"] == "absent"
    assert baseline["evidence"]["default"]["compute_between"] == 0
    candidate = _outcome(catalogue_runs, "candidate", "inductor.simple-overlap-default")
    assert catalogue_runs["candidate"]["facts"]["overlap_flag"] is True
    assert candidate["verdict"] == "confirmed"
    assert candidate["evidence"]["default"]["compute_between"] > 0
    assert candidate["evidence"]["pass_moved_nodes"]


@pytest.mark.torch_envs
def test_locality_in_training_is_a_new_opt_in_that_runs_only_when_enabled(
    catalogue_runs: dict[str, dict[str, Any]],
) -> None:
    baseline = _outcome(catalogue_runs, "baseline", "inductor.locality-in-training-opt-in")
    assert baseline["verdict"] == "absent"
    candidate = _outcome(catalogue_runs, "candidate", "inductor.locality-in-training-opt-in")
    assert candidate["verdict"] == "confirmed"
    assert candidate["evidence"]["default"]["locality_pass_runs"] == 0
    assert candidate["evidence"]["enabled"]["locality_pass_runs"] > 0


@pytest.mark.torch_envs
@pytest.mark.parametrize("role", ROLES)
def test_complex_decomposition_opt_in_works_with_a_known_gap_in_both_builds(
    catalogue_runs: dict[str, dict[str, Any]], role: str
) -> None:
    outcome = _outcome(catalogue_runs, role, "compile.complex-decomposition-opt-in")
    assert outcome["verdict"] == "confirmed"
    assert outcome["evidence"]["gaps"] == ["mul_then_add"]
    assert not outcome["evidence"]["control_without_opt_in"]["decomposed"]


@pytest.mark.torch_envs
def test_rubin_evidence_reflects_each_build(catalogue_runs: dict[str, dict[str, Any]]) -> None:
    for role in ROLES:
        build = _outcome(catalogue_runs, role, "platform.rubin-sm107")["evidence"]["build"]
        assert build["cuda_arch_list"] == catalogue_runs[role]["facts"]["arch_list"]
        assert build["sm_107_in_arch_list"] is False
    candidate = _outcome(catalogue_runs, "candidate", "platform.rubin-sm107")
    assert (
        candidate["evidence"]["build"]["inductor"]["_cuda_arch_with_compile_suffix('107')"]
        == "107a"
    )
    baseline = _outcome(catalogue_runs, "baseline", "platform.rubin-sm107")
    assert any(
        re.search(r"architecture > \d+: 107", w)
        for w in baseline["evidence"]["build"]["inductor"]["warnings"]
    )
