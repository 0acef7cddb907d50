"""The bench section end to end: real workers in both torch environments, a real store."""

from __future__ import annotations

import math

import pytest

from torchcanary.bench import section
from torchcanary.envs.cache import Environment
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.report.view import load_run_view

pytestmark = pytest.mark.torch_envs

MEASURED = tuple(v for v in section.VERDICTS if v not in ("skipped", "not-run"))
TINY_GEMM = {"kind": "gemm", "m": 64, "k": 64, "n": 64, "dtype": "float32"}


def _run(make_context, **bench: object):  # type: ignore[no-untyped-def]
    settings = section.parse_settings({"families": [], "warmup_max_s": 0.3, **bench})
    ctx = make_context(sections=("bench",), settings={"bench": settings})
    section.run(ctx)
    view = load_run_view(ctx.store, ctx.run_id)
    return ctx, {result.key: result for result in view.sections["bench"]}


def test_interleaved_ab_through_both_envs_stores_raw_samples_and_verdicts(make_context) -> None:
    ctx, results = _run(
        make_context,
        groups=2,
        rounds=4,
        samples_per_round=3,
        benchmarks=[
            TINY_GEMM,
            {"kind": "linear", "input": "3d", "batch": 1, "k": 256, "n": 256, "dtype": "bfloat16"},
            {"kind": "collective", "op": "all_gather", "bytes": 65536},
        ],
    )
    assert set(results) == {
        "gemm/64x64x64/fp32/cpu",
        "linear/[1,1,256]x[256,256]/bf16/cpu",
        "collective/all_gather/64KiB/gloox2",
    }
    for key, result in results.items():
        payload = result.payload
        assert result.verdict in MEASURED, (key, payload)
        assert math.isfinite(payload["ratio"]) and payload["ci_low"] <= payload["ratio"]
        assert payload["q_value"] is not None and payload["mde"] is not None
        assert set(payload["sides"]) == {"baseline", "baseline-aa", "candidate"}
        stored = ctx.store.measurements(ctx.run_id, key)
        for role in ("baseline", "baseline-aa", "candidate"):
            assert len(stored[(role, "samples_s")]) == 2 * 4 * 3
            assert set(stored[(role, "group")]) == {0.0, 1.0}
    gemm = results["gemm/64x64x64/fp32/cpu"].payload
    assert gemm["clock"] == "cpu"
    assert "aten::mm" in gemm["dispatch"]["baseline"]["ops"]
    assert "aten::mm" in gemm["dispatch"]["candidate"]["ops"]
    assert gemm["roofline"]["candidate"]["limiter"] in ("compute", "memory")
    assert gemm["machine_roofline"]["baseline"]["bandwidth"]["bytes_per_s"] > 0
    assert gemm["harness"]["affinity"] and gemm["harness"]["torch_threads"] == [1]
    gather = results["collective/all_gather/64KiB/gloox2"].payload
    bandwidth = gather["collective_bandwidth"]["candidate"]
    assert bandwidth["busbw_bytes_per_s"] == pytest.approx(bandwidth["algbw_bytes_per_s"] / 2)
    assert gather["clock"] == "wall"


def test_aa_run_compares_the_baseline_with_itself_and_finds_no_difference(make_context) -> None:
    # Three worker groups: one group alone can show nothing (its interval is unbounded).
    ctx, results = _run(
        make_context,
        aa=True,
        groups=3,
        rounds=8,
        equivalence=0.5,
        benchmarks=[{**TINY_GEMM, "m": 128, "k": 128, "n": 128}],
    )
    result = results["gemm/128x128x128/fp32/cpu"]
    assert result.verdict in ("same", "no-change-detected"), result.payload["reasons"]
    assert result.payload["aa"] and result.payload["mde"] > 0
    assert ("candidate", "samples_s") not in ctx.store.measurements(ctx.run_id, result.key)
    assert ("baseline-aa", "samples_s") in ctx.store.measurements(ctx.run_id, result.key)


def test_bad_inputs_are_skipped_with_a_clear_reason_and_the_run_goes_on(make_context) -> None:
    _ctx, results = _run(
        make_context,
        groups=1,
        rounds=2,
        aa_control=False,
        benchmarks=[
            {"kind": "gemm", "m": 200_000, "k": 200_000, "n": 200_000, "dtype": "float32"},
            {"kind": "linear", "input": "2d", "batch": 0, "k": 64, "n": 64, "dtype": "float32"},
            {
                "kind": "sdpa",
                "batch": 1,
                "heads": 2,
                "q_len": 4,
                "kv_len": 4,
                "head_dim": 8,
                "dtype": "int8",
            },
            {**TINY_GEMM, "device": "cuda"},
            TINY_GEMM,
        ],
    )
    reasons = {
        key: r.payload.get("reason", "") for key, r in results.items() if r.verdict == "skipped"
    }
    assert "only" in reasons["gemm/200000x200000x200000/fp32/cpu"]
    assert "smaller shapes" in reasons["gemm/200000x200000x200000/fp32/cpu"]
    assert "does no work" in reasons["linear/[0,64]x[64,64]/fp32/cpu"]
    assert "int8" in reasons["sdpa/b1h2q4kv4d8-full/int8/cpu"]
    assert "no CUDA GPU" in reasons["gemm/64x64x64/fp32/cuda"]
    assert results["gemm/64x64x64/fp32/cpu"].verdict in MEASURED


def test_hung_benchmark_is_isolated_as_timeout_and_the_others_still_run(make_context) -> None:
    _ctx, results = _run(
        make_context,
        groups=1,
        rounds=2,
        aa_control=False,
        # Each side's hung call costs the whole timeout, one side after the other; the tiny
        # gemm's calls (warm-up at most 0.3 s) take a fraction of it.
        timeout_s=4,
        benchmarks=[
            {"kind": "synthetic", "op": "sleep", "seconds": 3600, "label": "hang"},
            TINY_GEMM,
        ],
    )
    hung = results["synthetic/sleep/hang"]
    assert hung.verdict == "not-run"  # hung on both sides: not an honest skip (issue 38)
    assert {f["status"] for f in hung.payload["failed"].values()} == {"timeout"}
    assert set(hung.payload["failed"]) == {"baseline", "candidate"}
    assert results["gemm/64x64x64/fp32/cpu"].verdict in MEASURED


def test_oneshot_samples_time_import_first_call_and_a_cold_compile(
    baseline_env: Environment, import_root
) -> None:
    worker = WorkerProcess(baseline_env.python, import_root)
    try:
        startup = worker.call(
            "torchcanary.worker.bench.oneshot:startup_sample",
            {
                "measures": ["import_torch", "first_linear"],
                "device": "cpu",
                "threads": 1,
                "timeout_s": 120,
            },
            150,
        )
        assert startup.ok, startup.error
        assert startup.value["seconds"]["import_torch"] > 0
        assert startup.value["seconds"]["first_linear"] > 0
        compiled = worker.call(
            "torchcanary.worker.bench.oneshot:compile_sample",
            {
                "model": "mlp_graph_break",
                "backend": "aot_eager",
                "device": "cpu",
                "threads": 1,
                "min_sample_s": 0.001,
                "timeout_s": 240,
            },
            270,
        )
        assert compiled.ok, compiled.error + compiled.stderr_tail
        assert compiled.value["graph_breaks"] >= 1 and compiled.value["graphs"] >= 2
        assert compiled.value["seconds"]["cold"] > compiled.value["seconds"]["step"] > 0
        assert "dynamo" in compiled.value["phases"]
    finally:
        worker.close()


BUSY = {"kind": "synthetic", "op": "busy", "iterations": 20_000}


def test_a_settled_benchmark_stops_at_its_look_and_says_when_and_why(make_context) -> None:
    # Four times the work: clear of the early bar (1 % of fdr / m) after 4 groups even with
    # the noise of a loaded machine, where a trimmed t on 4 groups has 3 degrees of freedom.
    heavier = {**BUSY, "label": "heavier", "overrides": {"B": {"iterations": 80_000}}}
    _, results = _run(
        make_context, groups=6, first_look=4, rounds=6, fdr=0.05, benchmarks=[heavier, BUSY]
    )
    heavy = results["synthetic/busy/heavier"]
    assert heavy.verdict == "slower", heavy.payload["reasons"]
    assert heavy.payload["settled"]["groups"] == 4
    assert heavy.payload["harness"]["groups_measured"] == 4
    assert "early bar" in heavy.payload["reasons"][0]
    assert heavy.payload["ratio"] == pytest.approx(4.0, rel=0.3)


def test_the_budget_ends_the_schedule_and_what_is_left_is_judged_on_what_it_has(
    make_context,
) -> None:
    _, results = _run(make_context, groups=5, rounds=2, budget_s=0.5, benchmarks=[BUSY])
    (result,) = results.values()
    assert result.payload["harness"]["ended_by"] == "budget"
    assert result.payload["harness"]["groups_run"] == 1
    assert result.verdict == "too-noisy"  # one group can never be significant
