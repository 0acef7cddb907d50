"""The explain section's records, Why blocks and results.json part, on stored rows."""

from __future__ import annotations

import time

from torchcanary.bench.findings import findings
from torchcanary.bench.result import BenchMeasured, BenchVerdict
from torchcanary.explain import report
from torchcanary.explain.cause import Cause, ExplainStatus, Explanation, from_json
from torchcanary.explain.confounds import candidates
from torchcanary.explain.job import Contribution
from torchcanary.explain.result import from_rows
from torchcanary.explain.section import combine, run, status_of
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding
from torchcanary.store.rows import SectionResult


def _explanation() -> Explanation:
    return Explanation(
        key="bench:startup/import_torch",
        verdict=ExplainStatus.PARTLY,
        section="bench",
        item="startup/import_torch",
        delta="+21 %",
        causes=(Cause("build", "CUDA libraries", 0.6, 0.5, 0.7, "12 libraries", "cmd"),),
        unexplained=0.3,
        unexplained_low=0.2,
        unexplained_high=0.4,
        seconds=12.5,
        not_checked=("ops: needs a GPU",),
    )


def test_an_explanation_reads_back_as_it_was_stored() -> None:
    stored = _explanation()
    assert from_json(stored.to_json()) == stored


def test_the_why_block_shows_shares_with_intervals_unexplained_and_what_was_not_checked(
    store,
) -> None:
    run_id = store.create_run({})
    store.save_section_result(run_id, SectionResult.of("explain", _explanation()))
    view = load_run_view(store, run_id)
    text = report.markdown(view)
    assert "build CUDA libraries: 60% [50%, 70%]" in text
    assert "unexplained: 30% [20%, 40%]" in text
    assert "not checked: ops: needs a GPU" in text
    assert "12 s" in text or "13 s" in text
    assert "unexplained" in report.html(view)
    assert report.json_parts(view)["explanations"][0]["payload"]["causes"][0]["share"] == 0.6


def test_unexplained_is_never_spread_over_the_causes() -> None:
    finding = Finding("bench", "x", "timing", "+10 %")
    part = Contribution((Cause("setting", "a", 0.4, 0.3, 0.5),), unexplained=(0.6, 0.5, 0.7))
    explanation = combine(finding, [part], [], 1.0)
    assert explanation.unexplained == 0.6
    assert explanation.causes[0].share == 0.4
    assert explanation.verdict is ExplainStatus.PARTLY
    assert status_of([], None) is ExplainStatus.NOT_CHECKED
    assert status_of([], (1.0, 0.9, 1.1)) is ExplainStatus.UNEXPLAINED
    assert status_of([Cause("s", "a", 1.0, 0.9, 1.1)], (0.0, -0.1, 0.1)) is ExplainStatus.EXPLAINED


def test_compare_reads_each_findings_verdict_and_leading_cause(store) -> None:
    from torchcanary.explain.history import compared
    from torchcanary.report.view import load_run_view

    run_id = store.create_run({})
    store.save_section_result(run_id, SectionResult.of("explain", _explanation()))
    found = compared(load_run_view(store, run_id))
    assert found["bench:startup/import_torch"] == {
        "verdict": "partly-explained",
        "cause": "build CUDA libraries",
        "share": 0.6,
    }


def test_explain_off_stores_its_summary_so_the_run_is_not_objected_to(make_context) -> None:
    from torchcanary.explain.cause import ExplainSummary
    from torchcanary.explain.result import from_rows
    from torchcanary.explain.section import run

    ctx = make_context(sections=("explain",), settings={"explain": {"mode": "off"}})
    run(ctx)
    summary, found = from_rows(ctx.store.section_results(ctx.run_id, "explain"))
    assert summary == ExplainSummary(mode="off") and found == []


def test_a_cause_clear_of_zero_but_not_of_a_material_share_leaves_the_finding_unexplained() -> None:
    """With several candidate causes one interval clears 0 by chance often; a cause counts
    only above ``shares.MATERIAL`` of the change."""
    small = Cause("setting", "a", 0.15, 0.05, 0.25)
    assert status_of([small], (0.85, 0.75, 0.95)) is ExplainStatus.UNEXPLAINED


def test_parts_that_together_account_for_the_change_leave_it_partly_explained() -> None:
    """A split into two parts of a near tie: neither part's interval clears a quarter of the
    change on its own, but together they leave at most half of it (the unexplained interval
    lies below three quarters), so the verdict does not hang on which part one run's noise
    favoured."""
    parts = [Cause("build", "a", 0.45, 0.2, 1.1), Cause("python", "b", 0.5, 0.18, 1.2)]
    assert status_of(parts, (0.05, -1.0, 0.5)) is ExplainStatus.PARTLY
    assert status_of(parts, (0.05, -1.0, 0.8)) is ExplainStatus.UNEXPLAINED


def test_a_benchmark_without_a_detected_change_is_not_explained(store) -> None:
    run_id = store.create_run({})
    for key, verdict, ratio in (
        ("collective/all_reduce/4KiB", BenchVerdict.NO_CHANGE_DETECTED, 0.86),
        ("copy/fp32", BenchVerdict.SLOWER, 1.5),
    ):
        record = BenchMeasured(key, verdict, kind="copy", ratio=ratio, ci_low=0.2, ci_high=2.9)
        store.save_section_result(run_id, SectionResult.of("bench", record))
    assert [f.item for f in findings(load_run_view(store, run_id))] == ["copy/fp32"]


def test_an_untested_confound_leads_with_why_it_was_not_tried_and_the_ops_it_would_move() -> None:
    """A finding with no way to be measured again alone (a collective, a GPU startup):
    the CPU capability the run names is not set back there; it is named first, with the
    reason, linked to the ops that moved."""
    named = {"compiler": ("GCC 11", "GCC 13"), "cpu_capability": ("AVX512", "DEFAULT")}
    ops = Contribution(
        (Cause("op", "aten::sigmoid", 0.47, 0.4, 0.54), Cause("op", "aten::add", 0.4, 0.33, 0.47)),
        unexplained=(0.13, 0.05, 0.21),
    )
    finding = Finding("bench", "workload/step", "timing", "+251 %")
    explanation = combine(finding, [ops, Contribution(candidates(named, False))], [], 1.0)
    assert [c.name for c in explanation.causes] == [
        "cpu_capability",
        "compiler",
        "aten::sigmoid",
        "aten::add",
    ]
    lead = explanation.causes[0]
    assert lead.share is None and "AVX512 vs DEFAULT; untested" in lead.evidence
    assert "ATEN_CPU_CAPABILITY" in lead.evidence and "aten::sigmoid, aten::add" in lead.evidence
    assert "property of the build" in explanation.causes[1].evidence


def test_a_confound_that_can_be_set_back_is_left_to_the_counterfactual() -> None:
    named = {"cpu_capability": ("AVX512", "DEFAULT"), "torch_num_threads": (4, 1)}
    assert candidates(named, True) == []


def test_the_budget_counts_this_invocations_own_time_and_full_has_none(make_context) -> None:
    budgets = []
    for mode in ("quick", "full"):
        ctx = make_context(sections=("explain",), settings={"explain": {"mode": mode}})
        ctx.started = time.monotonic() - 100  # this invocation began 100 s ago
        run(ctx)
        summary, _ = from_rows(ctx.store.section_results(ctx.run_id, "explain"))
        assert summary is not None
        budgets.append(summary.budget_s)
    assert budgets[0] is not None and 25.0 <= budgets[0] < 26.0  # a quarter of 100 s
    assert budgets[1] is None


def test_another_explainers_shares_are_detail_never_shares_beside_the_decomposition(
    store,
) -> None:
    """The ops account for the change with the least left over: they are the parts; the
    setting's share measures the same change another way and is shown inside one view."""
    ops = Contribution((Cause("op", "aten::add", 0.8, 0.7, 0.9),), unexplained=(0.2, 0.1, 0.3))
    setting = Contribution(
        (Cause("setting", "num_threads", 0.5, 0.3, 0.7),), unexplained=(0.5, 0.3, 0.7)
    )
    explanation = combine(Finding("bench", "x", "timing", "+50 %"), [ops, setting], [], 1.0)
    assert explanation.unexplained == 0.2
    shared = [c for c in explanation.causes if c.share is not None]
    assert [c.name for c in shared] == ["aten::add"]  # with the unexplained, they add up
    [view] = [c for c in explanation.causes if c.kind == "view"]
    assert view.detail["within"][0].startswith("setting num_threads: 50% [30%, 70%]")
    run_id = store.create_run({})
    store.save_section_result(run_id, SectionResult.of("explain", explanation))
    text = report.markdown(load_run_view(store, run_id))
    assert "- within by setting: setting num_threads: 50% [30%, 70%]" in text


def test_the_why_block_shows_every_part_and_a_few_detail_lines_under_each() -> None:
    within = {"within": [f"library lib{i}.so" for i in range(6)]}
    parts = (
        Cause("build", "own", 0.4, 0.3, 0.9, detail=within),
        Cause("python", "rest", 0.5, 0.2, 1.0),
        Cause("shared-libraries", "both", 0.05, -0.01, 0.1),
    )
    explanation = Explanation("bench:x", ExplainStatus.PARTLY, causes=parts, unexplained=0.05)
    lines = report._lines(explanation)
    assert [line.split(":")[0] for line in lines if not line.startswith("within")] == [
        "build own",
        "python rest",
        "shared-libraries both",
        "unexplained",
    ]
    assert lines[1:5] == [
        "within own: library lib0.so",
        "within own: library lib1.so",
        "within own: library lib2.so",
        "within own: ... 3 more in results.json",
    ]
