"""Dispatch profiles and rooflines kept for later runs of the same fixed environment, and
reused only while everything they depend on is unchanged."""

from __future__ import annotations

import html
import time
from pathlib import Path

import pytest

from torchcanary.bench import kept_facts, section
from torchcanary.bench import report as bench_report
from torchcanary.bench.kept_dispatch import DISPATCH_PROFILES
from torchcanary.bench.kept_facts import REUSED, KeptFacts
from torchcanary.bench.kept_rooflines import ROOFLINES
from torchcanary.envs.cache import Environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.report.view import load_run_view
from torchcanary.results import Manifest
from torchcanary.runner import record_manifests

GEMM = {"kind": "gemm", "m": 64, "k": 64, "n": 64, "dtype": "float32", "device": "cpu"}
PROFILE = {"ops": {"aten::mm": 1.0}, "kernels": {}, "library_calls": {}, "torch_version": "x"}


def _reuse(
    tmp_path: Path,
    spec: str = "torch==2.13.0 numpy",
    warn=None,
    kind=DISPATCH_PROFILES,
    **facts: str,
):
    env = Environment("baseline", parse_env_spec(spec), "/v/bin/python", "/v", "2.13.0", True, 0)
    manifest = Manifest({"torch_version": "2.13.0+cpu", "cpu_model": "Xeon", **facts})
    return KeptFacts(
        kind,
        tmp_path / "kept",
        {"baseline": env},
        {"baseline": manifest},
        "run-1",
        "",
        warn or (lambda message: None),
    )


def test_a_kept_profile_comes_back_marked_as_reused_for_the_same_spec_only(tmp_path) -> None:
    _reuse(tmp_path).keep("baseline", GEMM, PROFILE)
    found = _reuse(tmp_path).load("baseline", GEMM)
    assert found is not None
    assert found["ops"] == PROFILE["ops"] and found[REUSED]["run_id"] == "run-1"
    assert _reuse(tmp_path).load("baseline", {**GEMM, "m": 128}) is None
    assert _reuse(tmp_path).load("candidate", GEMM) is None
    assert _reuse(tmp_path, cpu_model="EPYC").load("baseline", GEMM) is None


def test_workloads_interpreters_and_failed_profiles_are_never_kept(tmp_path) -> None:
    workload = {"kind": "workload", "target": "mod:step"}
    _reuse(tmp_path).keep("baseline", workload, PROFILE)
    _reuse(tmp_path).keep("baseline", {**GEMM, "m": 32}, {"error": "timeout: 180 s"})
    interpreter = _reuse(tmp_path, spec="python:/usr/bin/python3")
    interpreter.keep("baseline", GEMM, PROFILE)
    assert not list(tmp_path.glob("kept/*.json"))
    assert interpreter.load("baseline", GEMM) is None


def test_a_damaged_entry_is_ignored_with_a_warning_and_profiled_again(tmp_path) -> None:
    _reuse(tmp_path).keep("baseline", GEMM, PROFILE)
    (entry,) = (tmp_path / "kept").glob("*.json")
    entry.write_text("{not json")
    heard: list[str] = []
    assert _reuse(tmp_path, warn=heard.append).load("baseline", GEMM) is None
    assert len(heard) == 1 and "dispatch profile" in heard[0]


def test_a_roofline_is_kept_whole_for_the_same_request_and_for_a_week(
    tmp_path, monkeypatch
) -> None:
    request = {"device": "cpu", "dtypes": ["float32"], "working_sets": [4096], "threads": 1}
    roofline = {"bandwidth": {"bytes_per_s": 1e10}, "peak": {"float32": {}}, "errors": {}}
    half = {**roofline, "errors": {"bandwidth": "MemoryError"}}
    _reuse(tmp_path, kind=ROOFLINES).keep("baseline", {**request, "threads": 2}, half)
    assert not list(tmp_path.glob("kept/*.json"))  # a half-measured roofline is not kept
    _reuse(tmp_path, kind=ROOFLINES).keep("baseline", request, roofline)
    found = _reuse(tmp_path, kind=ROOFLINES).load("baseline", request)
    assert found is not None and found[REUSED]["run_id"] == "run-1"
    assert {k: v for k, v in found.items() if k != REUSED} == roofline
    assert _reuse(tmp_path, kind=ROOFLINES).load("baseline", {**request, "threads": 2}) is None
    assert _reuse(tmp_path).load("baseline", request) is None  # a profile is another kind
    eight_days_on = time.time() + 8 * 24 * 3600
    monkeypatch.setattr(kept_facts.time, "time", lambda: eight_days_on)
    assert _reuse(tmp_path, kind=ROOFLINES).load("baseline", request) is None


@pytest.mark.torch_envs
def test_a_second_bench_reuses_what_the_first_profiled(make_context) -> None:
    settings = section.parse_settings(
        {
            "families": [],
            "warmup_max_s": 0.2,
            # What is kept is made once per side and run: one group, no A/A side, suffice.
            "groups": 1,
            "rounds": 2,
            "aa_control": False,
            "benchmarks": [{"kind": "gemm", "m": 64, "k": 64, "n": 64, "dtype": "float32"}],
        }
    )
    dispatch, rooflines, pages, run_ids = [], [], [], []
    for _ in range(2):
        ctx = make_context(sections=("bench",), settings={"bench": settings})
        record_manifests(ctx)
        section.run(ctx)
        (result,) = load_run_view(ctx.store, ctx.run_id).sections["bench"]
        dispatch.append(result.payload["dispatch"])
        rooflines.append(result.payload["machine_roofline"])
        pages.append(html.unescape(bench_report.html(load_run_view(ctx.store, ctx.run_id))))
        run_ids.append(ctx.run_id)
    first, second = dispatch
    for role in ("baseline", "candidate"):
        assert REUSED not in first[role] and "aten::mm" in first[role]["ops"]
        assert second[role][REUSED]["run_id"] == run_ids[0]
        assert {k: v for k, v in second[role].items() if k != REUSED} == first[role]
    for role in ("baseline", "candidate"):  # the bounds too, and the report says whose
        assert REUSED not in rooflines[0][role] and rooflines[0][role]["bandwidth"]
        assert rooflines[1][role][REUSED]["run_id"] == run_ids[0]
        assert {k: v for k, v in rooflines[1][role].items() if k != REUSED} == rooflines[0][role]
    assert "bounds kept from earlier runs" not in pages[0]
    kept = "bounds kept from earlier runs of the same environment: the baseline's from run"
    assert f"{kept} {run_ids[0]}" in pages[1]
