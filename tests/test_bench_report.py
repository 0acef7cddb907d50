"""The bench report and policy over results stored in a real SQLite store."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markdown import Markdown

from torchcanary.bench import report, section
from torchcanary.bench.history_plot import history_forest
from torchcanary.bench.plots import ForestRow, forest
from torchcanary.bench.result import BenchVerdict, unmeasured_verdict
from torchcanary.bench.view import recent
from torchcanary.plan import RunPlan
from torchcanary.policy import decide, resolve_policy
from torchcanary.report.view import load_run_view
from torchcanary.results import Manifest
from torchcanary.section_types import RunView
from torchcanary.sections import get_section
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

PLANNED = ("hang", "both-fail", "no-gpu", "fine")  # the benchmarks the not-run test plans


def _side(median: float) -> dict:
    return {
        "n": 30,
        "median_s": median,
        "q05_s": median * 0.9,
        "q25_s": median * 0.95,
        "q75_s": median * 1.05,
        "q95_s": median * 1.1,
        "min_s": median * 0.8,
        "max_s": median * 1.3,
        "robust_cv": 0.04,
        "on_cpu": 0.97,
        "plot_s": [median * (0.95 + i / 100) for i in range(10)],
    }


def _measured(ratio: float, low: float, high: float, q: float, **extra: object) -> dict:
    payload = {
        "kind": "linear",
        "spec": {"kind": "linear", "device": "cpu"},
        "aa": False,
        "sides": {
            "baseline": _side(1e-3),
            "baseline-aa": _side(1e-3),
            "candidate": _side(1e-3 * ratio),
        },
        "comparison": {
            "method": "Wilcoxon signed-rank on 60 round-paired log ratios",
            "p_value": q / 2,
            "ratio_of_medians": ratio,
            "mann_whitney_p": q,
        },
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "q_value": q,
        "mde": 0.02,
        "equivalence": 0.05,
        "reasons": ["because"],
        "noise_warnings": [],
        "aa_control": {
            "testable": True,
            "ratio": 1.0,
            "ci_low": 0.99,
            "ci_high": 1.01,
            "q_value": 0.8,
        },
        "roofline": {
            "baseline": {
                "limiter": "memory",
                "fraction": 0.62,
                "achieved_bytes_per_s": 5e9,
                "achieved_flops_per_s": 1e9,
            }
        },
        "confounds": {"blas": ["MKL", "OpenBLAS"]},
        "dispatch_diff": {
            "changed": True,
            "changes": {
                "ops": {
                    "only_baseline": ["aten::mm"],
                    "only_candidate": ["aten::gemv"],
                    "count_changed": {},
                }
            },
        },
        "harness": {"measure_s": 4.0},
    }
    payload.update(extra)
    return payload


def _view(store: SqliteStore, results: list[SectionResult], plan: RunPlan | None = None) -> RunView:
    run_id = store.create_run(plan.to_json() if plan else {})
    for role, blas in (("baseline", "MKL"), ("candidate", "OpenBLAS")):
        store.save_environment(
            run_id, role, f"torch {role}", "/py", "2.x", 0.0, True, Manifest({"blas": blas})
        )
    for result in results:
        store.save_section_result(run_id, result)
    return load_run_view(store, run_id)


def test_report_shows_confounds_first_escapes_names_and_plots_every_benchmark(
    store: SqliteStore,
) -> None:
    view = _view(
        store,
        [
            SectionResult(
                "bench",
                "linear/<script>x</script>",
                "both",
                "slower",
                _measured(1.2, 1.1, 1.3, 1e-4),
            ),
            SectionResult("bench", "gemm/ok", "both", "same", _measured(1.0, 0.99, 1.01, 0.7)),
            SectionResult(
                "bench",
                "gemm/huge",
                "both",
                "skipped",
                {"kind": "gemm", "reason": "needs about 149GiB", "skipped": {}},
            ),
        ],
    )
    html = report.html(view)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.index("Not only the torch version differs") < html.index("<table class='bench'>")
    assert html.count("<svg") >= 3  # forest plots plus a distribution per measured benchmark
    assert "only candidate ran aten::gemv" in html
    assert "needs about 149GiB" in html
    assert "also differs: blas" in html
    markdown = report.markdown(view)
    assert "**same** (1)" in markdown and "- `gemm/ok`*^ 1.000 [0.990, 1.010]" in markdown
    assert "blas MKL vs OpenBLAS" in markdown


def test_a_reused_dispatch_profile_says_which_run_made_it_and_how_long_before(
    store: SqliteStore,
) -> None:
    view = _view(store, [])
    ran = {"ops": {"aten::mm": 1.0}, "kernels": {}, "library_calls": {}}
    kept = {**ran, "reused": {"run_id": "run-earlier", "made_at": view.run.created_at - 7200}}
    payload = _measured(
        1.0,
        0.99,
        1.01,
        0.7,
        dispatch={"baseline": kept, "candidate": ran},
        dispatch_diff={"changed": False, "changes": {}},
    )
    store.save_section_result(
        view.run.run_id, SectionResult("bench", "gemm/ok", "both", "same", payload)
    )
    html = report.html(load_run_view(store, view.run.run_id))
    assert "the same operators, kernels and library calls in both (profiles kept" in html
    assert "the baseline&#x27;s from run run-earlier, 2.0 h before this run" in html


def test_plots_shade_the_band_this_run_decided_with_not_a_fixed_one(store: SqliteStore) -> None:
    # equivalence 0.05 narrowed by the run's bench_max_slowdown 0.03: "same" had to fit 3 %.
    _view(  # an earlier run, so the report has a history to draw
        store, [SectionResult("bench", "gemm/ok", "both", "same", _measured(1.0, 0.99, 1.01, 0.7))]
    )
    run_id = store.create_run({"policy": {"bench_max_slowdown": 0.03}})
    store.save_section_result(
        run_id, SectionResult("bench", "gemm/ok", "both", "same", _measured(1.01, 1.0, 1.02, 0.6))
    )
    view = load_run_view(store, run_id)
    html = report.html(view)
    entries = recent(view, "gemm/ok")
    assert len(entries) == 2
    assert history_forest("gemm/ok", entries, 0.03) in html
    assert history_forest("gemm/ok", entries, 0.02) not in html
    assert forest([ForestRow("ok", 1.01, 1.0, 1.02, "same")], 0.03, "gemm") in html
    assert forest([ForestRow("ok", 1.01, 1.0, 1.02, "same")], 0.05, "gemm") not in html


def test_junit_fails_a_slowdown_beyond_policy_and_does_not_pass_noise(store: SqliteStore) -> None:
    view = _view(
        store,
        [
            SectionResult("bench", "slow", "both", "slower", _measured(1.2, 1.1, 1.3, 1e-4)),
            SectionResult("bench", "noisy", "both", "too-noisy", _measured(1.0, 0.7, 1.4, 0.9)),
            SectionResult("bench", "fine", "both", "same", _measured(1.0, 0.99, 1.01, 0.9)),
            SectionResult(
                "bench", "unshown", "both", "no-change-detected", _measured(1.0, 0.9, 1.1, 0.9)
            ),
        ],
    )
    statuses = {case.name: case.status for case in report.junit_cases(view)}
    assert statuses == {
        "slow": "failure",
        "noisy": "skipped",
        "fine": "passed",
        "unshown": "skipped",
    }


def test_the_terminal_summary_fits_one_screen_at_80_columns(store: SqliteStore) -> None:
    # A default CPU run: 18 benchmarks, a BLAS confound and noise warnings on half of them.
    noisy = [
        "candidate: spread 12% of the median (warn above 10%)",
        "baseline: on a CPU only 80% of the wall time; other processes competed for the cores",
    ]
    names = [f"linear/[{b},1,4096]x[4096,4096]/bf16/cpu-{i}" for i, b in enumerate([1, 32] * 9)]
    verdicts = ["slower", "same", "no-change-detected", "too-noisy", "faster", "same"] * 3
    view = _view(
        store,
        [
            SectionResult(
                "bench",
                name,
                "both",
                verdict,
                _measured(1.2, 1.1, 1.3, 1e-4, noise_warnings=noisy if i % 2 else []),
            )
            for i, (name, verdict) in enumerate(zip(names, verdicts, strict=True))
        ],
    )
    console = Console(width=80, record=True, force_terminal=False)
    console.print(Markdown(report.markdown(view)))
    lines = console.export_text().splitlines()
    text = " ".join(lines)
    assert text.count("MKL vs OpenBLAS") == 1  # the confound, once, above the list
    assert "spread 12%" not in text and "competed for the cores" not in text
    assert all(name in text for name in names)  # names are never cut short
    assert len(lines) <= 18 + 24  # a line per benchmark, a heading per verdict


def test_policy_blocks_significant_slowdowns_beyond_its_threshold(store: SqliteStore) -> None:
    view = _view(
        store,
        [
            SectionResult("bench", "a", "both", "slower", _measured(1.08, 1.06, 1.10, 1e-4)),
            SectionResult("bench", "b", "both", "slower", _measured(1.03, 1.02, 1.04, 1e-4)),
            SectionResult("bench", "c", "both", "too-noisy", _measured(1.5, 0.5, 3.0, 0.6)),
        ],
    )
    reasons = section.blocking_reasons(view, {})
    assert len(reasons) == 1 and reasons[0].startswith("a: +8.0% slower")
    assert reasons[0].endswith("not only torch differs: blas MKL vs OpenBLAS")
    assert len(section.blocking_reasons(view, {"bench_max_slowdown": 0.02})) == 2


def test_a_benchmark_a_side_could_not_run_is_a_unit_not_checked(store: SqliteStore) -> None:
    """Issue 28 item 1, issue 38: a benchmark that crashed, hung or raised on a side is
    stored ``not-run`` (an honest skip stays ``skipped``) and objects through the core's
    rule, naming it, which a policy may turn into a warning."""
    failure = {"status": "timeout", "error": "no answer within 60 s"}
    benchmarks = [{"kind": "synthetic", "op": "add", "id": key} for key in PLANNED]
    settings = {
        "bench": get_section("bench").parse_settings({"families": [], "benchmarks": benchmarks})
    }
    plan = RunPlan("torch==2.13.0", "torch==2.14.1", ("bench",), settings=settings)

    def unmeasured(key: str, verdict: str, failed: dict[str, Any]) -> SectionResult:
        payload = {"kind": "gemm", "reason": "timeout", "skipped": {}, "failed": failed}
        return SectionResult("bench", key, "both", verdict, payload)

    view = _view(
        store,
        [
            unmeasured("hang", "not-run", {"candidate": failure}),
            unmeasured("both-fail", "not-run", {"candidate": failure, "baseline": failure}),
            unmeasured("no-gpu", "skipped", {}),
            SectionResult("bench", "fine", "both", "same", _measured(1.0, 0.99, 1.01, 0.9)),
        ],
        plan,
    )
    assert section.blocking_reasons(view, {}) == []  # not the bench's own rule any more
    decision = decide(view, resolve_policy({}, ("bench",)), ("bench",), {})
    assert decision.reasons == (
        "section bench: 2 planned unit(s) not checked, so they say nothing about the "
        "candidate: hang (both) not-run: timeout; both-fail (both) not-run: timeout",
    )
    relaxed = resolve_policy({"block_on_not_run": False}, ("bench",))
    warned = decide(view, relaxed, ("bench",), {})
    assert warned.go and warned.headline == "go with 2 units not checked"
    assert warned.warnings[0].startswith("section bench: 2 planned unit(s) not checked")
    assert warned.warnings[0].endswith("(not blocking: block_on_not_run = false)")


def test_an_unmeasured_benchmark_is_not_run_where_a_side_failed_it_else_skipped() -> None:
    """Issue 38: the stored verdict says which, so the core can tell them apart."""
    assert unmeasured_verdict({"candidate": {"status": "crashed"}}) is BenchVerdict.NOT_RUN
    assert unmeasured_verdict({}) is BenchVerdict.SKIPPED


def test_an_aa_run_that_differs_from_itself_is_a_no_go_for_the_harness(store: SqliteStore) -> None:
    view = _view(
        store,
        [SectionResult("bench", "x", "both", "slower", _measured(1.05, 1.03, 1.07, 1e-4, aa=True))],
    )
    assert "A/A run: x differs from itself" in section.blocking_reasons(view, {})[0]


def test_results_json_is_strict_json_even_when_a_ratio_is_infinite(
    store: SqliteStore, tmp_path
) -> None:
    from torchcanary.report.render import write_outputs

    payload = _measured(float("inf"), float("nan"), float("inf"), 0.5, mde=float("inf"))
    view = _view(store, [SectionResult("bench", "linear/x", "both", "too-noisy", payload)])
    written = write_outputs(view, tmp_path)["json"].read_text()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    parsed = json.loads(written, parse_constant=refuse)
    (bench,) = parsed["sections"]["bench"]
    assert bench["payload"]["ratio"] is None and bench["payload"]["ci_low"] is None


def test_an_interval_or_mde_too_wide_to_mean_anything_is_not_printed_digit_by_digit(
    store: SqliteStore,
) -> None:
    # Two groups leave one degree of freedom: the bound and the MDE come out near 1e20.
    payload = _measured(1.008, 1e-9, 2.07e8, 0.9, mde=1.6e15)
    view = _view(store, [SectionResult("bench", "linear/wide", "both", "too-noisy", payload)])
    for text in (report.markdown(view), report.html(view)):
        assert "1.008 [0.000, over 1000]" in text
        assert "over 1000%" in text
        assert "207664" not in text and "e+" not in text


def test_a_same_row_shows_the_bound_that_decided_it_and_the_mde_only_where_it_means_something(
    store: SqliteStore,
) -> None:
    """Issue 28 item 11 (c): "same [0.967, 1.040], MDE 18.6%" read as a contradiction. A
    "same" shows its interval and the band it lies in (what decided it) and the largest
    change the interval leaves open; the MDE only where no change was found and none ruled
    out; a change found needs neither."""
    key = "linear/[32,4096]x[4096,4096]/bf16"
    same = _measured(1.002, 0.967, 1.040, 0.6, mde=0.186)
    view = _view(
        store,
        [
            SectionResult("bench", key, "both", "same", same),
            SectionResult(
                "bench", "gemm/open", "both", "no-change-detected", _measured(1.0, 0.9, 1.1, 0.5)
            ),
            SectionResult("bench", "gemm/slow", "both", "slower", _measured(1.2, 1.1, 1.3, 1e-4)),
        ],
    )
    markdown = report.markdown(view)
    assert "**same** (1): each interval inside ±5.0%" in markdown
    lines = {line.split("`")[1]: line for line in markdown.splitlines() if "`" in line}
    assert lines[key].endswith("1.002 [0.967, 1.040]")
    assert lines["gemm/open"].endswith("1.000 [0.900, 1.100] MDE 2.0%")
    assert lines["gemm/slow"].endswith("1.200 [1.100, 1.300]")
    assert "18.6%" not in markdown
    html = report.html(view)
    assert "<td>within ±4.0% (band ±5.0%)</td>" in html and "<td>MDE 2.0%</td>" in html
    assert "18.6%" not in html
