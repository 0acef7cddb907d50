"""The stack's pure parts: outcome transitions, re-run settling, timing, settings, policy,
and the report over a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.policy import decide, resolve_policy
from torchcanary.report.view import load_run_view
from torchcanary.section_types import RunView
from torchcanary.stack import report
from torchcanary.stack.diff import (
    TRACEBACK_CHARS,
    Thresholds,
    diff_suites,
    first_differing_lines,
    settle_reruns,
    timing_verdict,
    transition,
)
from torchcanary.stack.section import blocking_reasons, parse_settings
from torchcanary.store.rows import SUMMARY_KEY, SectionResult
from torchcanary.user_command.records import EnvRun, InstallOutcome, TestRecord, WarningRecord


def _run(role: str, tests: dict[str, TestRecord], status: str = "failed") -> EnvRun:
    return EnvRun(role, "2.x", status, "", InstallOutcome(True, []), pytest=True, tests=tests)


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        ("passed", "failed", "newly-failing"),
        ("skipped", "failed", "newly-failing"),
        ("xfailed", "failed", "newly-failing"),
        (None, "failed", "newly-failing"),
        ("passed", "error", "newly-erroring"),
        ("failed", "crashed", "newly-erroring"),
        ("passed", "timeout", "newly-erroring"),
        ("failed", "passed", "newly-passing"),
        ("skipped", "passed", "newly-passing"),
        ("error", None, "newly-passing"),
        ("passed", "skipped", "newly-skipped"),
        ("passed", "passed", None),
        ("failed", "failed", None),
        ("error", "failed", None),
        ("passed", "xpassed", None),
        (None, "passed", None),
    ],
)
def test_outcome_transition_names_the_change(before, after, verdict):
    assert transition(before, after) == verdict


def test_suite_diff_keeps_one_verdict_per_test_and_counts_the_rest():
    deprecated = WarningRecord("FutureWarning", "deprecation", "`x` is deprecated at 0x7f00ab12")
    baseline = _run(
        "baseline",
        {
            "t::same": TestRecord("passed", 0.01),
            "t::breaks": TestRecord("passed", 0.01),
            "t::warns": TestRecord(
                "passed",
                0.01,
                warnings=(
                    WarningRecord(
                        "FutureWarning", "deprecation", "`x` is deprecated at 0x7f00cd34"
                    ),
                ),
            ),
            "t::gone": TestRecord("passed", 0.01),
        },
    )
    candidate = _run(
        "candidate",
        {
            "t::same": TestRecord("passed", 0.01),
            "t::breaks": TestRecord(
                "failed",
                0.01,
                "AssertionError: 1 != 2",
                "def test():\nE       AssertionError: 1 != 2",
                warnings=(WarningRecord("UserWarning", "user", "new!"),),
            ),
            "t::warns": TestRecord(
                "passed",
                0.01,
                warnings=(
                    deprecated,
                    WarningRecord("DeprecationWarning", "deprecation", "other"),
                    WarningRecord("ResourceWarning", "other", "ignored kind"),
                ),
            ),
            "t::new": TestRecord("passed", 0.01),
        },
    )
    diff = diff_suites(baseline, candidate, Thresholds())
    by_key = {c.key: c for c in diff.changes}
    assert set(by_key) == {"t::breaks", "t::warns"}
    assert by_key["t::breaks"].verdict == "newly-failing"
    assert by_key["t::breaks"].also == ("new-warning",)
    assert by_key["t::breaks"].first_differing_lines["candidate"] == [
        "E       AssertionError: 1 != 2"
    ]
    # Same warning with another address is not new; only the other deprecation is.
    assert by_key["t::warns"].verdict == "new-warning"
    assert [w["message"] for w in by_key["t::warns"].new_warnings] == ["other"]
    assert diff.unchanged == 1
    assert diff.only_in_baseline == ["t::gone"]
    assert diff.only_in_candidate == ["t::new"]


def test_tests_not_reached_after_a_candidate_crash_are_not_called_passing():
    baseline = _run(
        "baseline", {"t::a": TestRecord("passed", 0.1), "t::b": TestRecord("failed", 0.1, "boom")}
    )
    candidate = _run(
        "candidate", {"t::a": TestRecord("crashed", 0.0, "killed by SIGSEGV")}, status="crashed"
    )
    diff = diff_suites(baseline, candidate, Thresholds())
    assert [(c.key, c.verdict) for c in diff.changes] == [("t::a", "newly-erroring")]
    assert diff.only_in_baseline == ["t::b"]


def test_a_break_is_deterministic_only_when_every_rerun_agrees():
    baseline = _run("baseline", {"t::x": TestRecord("passed", 0.1)})
    candidate = _run("candidate", {"t::x": TestRecord("failed", 0.1, "boom")})
    (change,) = diff_suites(baseline, candidate, Thresholds()).changes
    settled = settle_reruns(change, ["passed", "passed"], ["failed", "error"])
    assert settled.deterministic is True
    flaky = settle_reruns(change, ["passed", "passed"], ["failed", "passed"])
    assert flaky.deterministic is False and "flaky: passed 1 of 2" in flaky.detail
    also_flaky_before = settle_reruns(change, ["failed", "passed"], ["failed", "failed"])
    assert also_flaky_before.deterministic is False
    assert settle_reruns(change, ["passed"], ["absent"]).deterministic is False


def test_timing_verdict_needs_separated_samples_and_the_ratio():
    thresholds = Thresholds(slower_ratio=1.5, timing_min_s=0.1)
    assert timing_verdict([1.0, 1.1, 0.9], [2.0, 2.2, 1.9], thresholds)[0] == "slower"
    assert timing_verdict([2.0, 2.2, 1.9], [1.0, 1.1, 0.9], thresholds)[0] == "faster"
    overlapping = timing_verdict([1.0, 1.1, 2.5], [2.0, 2.2, 1.9], thresholds)
    assert overlapping is None
    assert timing_verdict([1.0, 1.1], [2.0, 2.2], thresholds) is None  # too few samples
    assert timing_verdict([0.01, 0.01, 0.01], [0.05, 0.05, 0.05], thresholds) is None
    assert timing_verdict([1.0, 1.0, 1.0], [1.3, 1.3, 1.3], thresholds) is None


def test_first_differing_lines_mask_environment_paths_and_addresses():
    base = "Traceback\n  File /envs/a/torch/x.py, line 3\nobject at 0x7f001234\nValueError: 1"
    cand = "Traceback\n  File /envs/b/torch/x.py, line 3\nobject at 0x7f00abcd\nValueError: 2"
    lines = first_differing_lines(base, cand, ("/envs/a", "/envs/b"))
    assert lines["line"] == 4
    assert lines["candidate"][-1] == "ValueError: 2"
    assert (
        first_differing_lines(base, base.replace("/envs/a", "/envs/b"), ("/envs/a", "/envs/b"))
        == {}
    )


def test_settings_fill_defaults_and_reject_bad_input_with_one_line(tmp_path: Path):
    parsed = parse_settings(
        {"command": "pytest -x tests", "with": "-e .", "cwd": str(tmp_path), "reruns": 2}
    )
    assert parsed["with"] == ["-e ."] and parsed["reruns"] == 2 and parsed["threads"] == 1
    assert parsed["cwd"] == str(tmp_path.resolve())
    for bad, words in [
        ({"comand": "pytest"}, "unknown key stack.comand"),
        ({"reruns": -1}, "at least 0"),
        ({"reruns": 1.5}, "an integer"),
        ({"command": "pytest 'unclosed"}, "check its quotes"),
        ({"cwd": str(tmp_path / "missing")}, "not a directory"),
        ({"requirements": ["nope.txt"], "cwd": str(tmp_path)}, "does not exist"),
        ({"warning_kinds": ["loud"]}, "is not one of"),
        ({"env": {"A": 1}}, "table of strings"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_settings(bad)


def _view(store, rows: list[SectionResult], policy: dict | None = None) -> RunView:
    plan = RunPlan("torch==a", "torch==b", sections=("stack",), policy=policy or {})
    run_id = store.create_run(plan.to_json())
    for row in rows:
        store.save_section_result(run_id, row)
    return load_run_view(store, run_id)


def _summary(verdict: str = "changes", **payload) -> SectionResult:
    return SectionResult(
        "stack",
        SUMMARY_KEY,
        "both",
        verdict,
        {"command": "pytest tests/", "reruns": 3, "counts": {}, **payload},
    )


def test_policy_blocks_on_deterministic_breaks_and_optionally_on_the_rest(store):
    view = _view(
        store,
        [
            _summary(),
            SectionResult("stack", "t::hard", "both", "newly-failing", {"deterministic": True}),
            SectionResult("stack", "t::flaky", "both", "newly-failing", {"deterministic": False}),
            SectionResult("stack", "numerics:logits", "both", "numeric-drift", {}),
            SectionResult("stack", "t::slow", "both", "slower", {"also": ["new-warning"]}),
        ],
    )
    (reason,) = blocking_reasons(view, {})
    assert "1 new failure(s)" in reason and "t::hard" in reason
    assert blocking_reasons(view, {"stack_max_new_failures": 1}) == []
    strict = blocking_reasons(
        view,
        {
            "stack_block_on_flaky": True,
            "stack_block_on_numeric_drift": True,
            "stack_block_on_new_warnings": True,
        },
    )
    assert len(strict) == 4
    assert any("t::slow" in r and "new warnings" in r for r in strict)


def test_policy_blocks_when_there_was_nothing_to_compare(store):
    """Issue 28 item 1: a command that could not run objects through the core's rule."""
    crashed = SectionResult("stack", SUMMARY_KEY, "candidate", "crashed", {"detail": "SIGKILL"})
    ran = SectionResult("stack", SUMMARY_KEY, "baseline", "passed", {"detail": "exit 0"})
    summary = _summary("not-compared", reason="the candidate did not run")
    view = _view(store, [ran, crashed, summary])
    assert blocking_reasons(view, {}) == []  # the core's rule, not the stack's own
    decision = decide(view, resolve_policy({}, ("stack",)), ("stack",), {})
    assert decision.reasons == (
        "section stack: 2 planned unit(s) not checked, so they say nothing about the "
        "candidate: __summary__ (candidate) crashed: SIGKILL; "
        "__summary__ (both) not-compared: the candidate did not run",
    )
    with pytest.raises(ConfigError, match=r"retired.*'block_on_not_run'"):
        resolve_policy({"stack_block_on_no_comparison": False}, ("stack",))
    assert blocking_reasons(_view(store, []), {}) == []


def test_report_puts_the_changes_table_first_and_escapes_everything(store):
    hostile = "<script>alert(1)</script>"
    view = _view(
        store,
        [
            _summary(counts={"newly-failing": 1, "unchanged": 4}),
            SectionResult(
                "stack",
                SUMMARY_KEY,
                "baseline",
                "passed",
                {"torch_version": "2.13.0", "detail": "exited with status 0"},
            ),
            SectionResult(
                "stack",
                "t::x" + hostile,
                "both",
                "newly-failing",
                {
                    "detail": hostile,
                    "deterministic": True,
                    "reruns": {"baseline": ["passed"], "candidate": ["failed"]},
                    "first_differing_lines": {"line": None, "candidate": ["E   " + hostile]},
                },
            ),
            SectionResult(
                "stack",
                "t::slow",
                "both",
                "slower",
                {
                    "detail": "median",
                    "durations": {"baseline": [1.0, 1.1, 1.0], "candidate": [2.0, 2.1, 2.2]},
                },
            ),
        ],
    )
    page = report.html(view)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.index("<table>") < page.index("<details>")
    assert "deterministic (1 re-runs)" in page
    assert page.count("<circle") == 6
    text = report.markdown(view)
    assert "| newly-failing |" in text and "1 newly-failing" in text
    cases = {c.name: c for c in report.junit_cases(view)}
    assert cases["newly-failing: t::x" + hostile].status == "failure"
    assert cases["slower: t::slow"].status == "passed"
    assert cases["baseline: run the stack"].status == "passed"


@pytest.mark.parametrize(
    ("policy", "failing"),
    [
        ({}, {"newly-failing: t::hard"}),
        ({"stack_max_new_failures": 1}, set()),
        ({"stack_block_on_flaky": True}, {"newly-failing: t::hard", "newly-failing: t::flaky"}),
        ({"stack_block_on_slower": True}, {"newly-failing: t::hard", "slower: t::slow"}),
    ],
)
def test_junit_fails_exactly_the_changes_the_runs_policy_blocks_on(store, policy, failing):
    def change(key: str, verdict: str, **payload) -> SectionResult:
        return SectionResult("stack", key, "both", verdict, {"detail": "", **payload})

    rows = [
        _summary(counts={"newly-failing": 2, "slower": 1}),
        change("t::hard", "newly-failing", deterministic=True),
        change("t::flaky", "newly-failing", deterministic=False),
        change("t::slow", "slower"),
    ]
    view = _view(store, rows, policy)
    cases = {c.name: c.status for c in report.junit_cases(view) if c.name.startswith(("new", "sl"))}
    assert {name for name, status in cases.items() if status == "failure"} == failing
    go = decide(view, view.run.plan["policy"], ("stack",), {}).go
    assert go is not failing


def test_report_says_so_when_the_stack_was_not_run(store):
    view = _view(store, [])
    assert "not run" in report.html(view)
    assert "not run" in report.markdown(view)
    assert report.junit_cases(view) == []


# issue 38 item 5: coverage the candidate lost ---------------------------------------------
def test_tests_that_ran_in_the_baseline_and_not_in_the_candidate_are_lost_coverage():
    baseline = _run(
        "baseline",
        {
            "t::skipped_now": TestRecord("passed", 0.1),
            "t::gone": TestRecord("passed", 0.1),
            "t::failed_then_gone": TestRecord("failed", 0.1, "boom"),
            "t::always_skipped": TestRecord("skipped", 0.0),
            "t::kept": TestRecord("passed", 0.1),
        },
    )
    candidate = _run(
        "candidate",
        {
            "t::skipped_now": TestRecord("skipped", 0.0, "needs the old API"),
            "t::always_skipped": TestRecord("skipped", 0.0),
            "t::kept": TestRecord("passed", 0.1),
        },
    )
    diff = diff_suites(baseline, candidate, Thresholds())
    assert diff.lost == ["t::failed_then_gone", "t::gone", "t::skipped_now"]
    assert diff.lost_passed == ["t::gone", "t::skipped_now"]


@pytest.mark.parametrize(
    ("block", "reasons"),
    [
        (
            "passed",
            [
                "stack: 2 test(s) that passed in the baseline did not run in the candidate "
                "(newly skipped or missing): t::gone, t::skipped_now"
            ],
        ),
        (
            "any",
            [
                "stack: 3 test(s) that ran in the baseline did not run in the candidate "
                "(newly skipped or missing): t::failed_then_gone, t::gone, t::skipped_now"
            ],
        ),
        ("never", []),
    ],
)
def test_lost_coverage_is_counted_and_named_and_blocks_as_the_policy_says(store, block, reasons):
    """Tests that passed in the baseline and did not run in the candidate passed silently."""
    lost = {
        "lost": ["t::failed_then_gone", "t::gone", "t::skipped_now"],
        "lost_count": 3,
        "lost_passed": ["t::gone", "t::skipped_now"],
        "lost_passed_count": 2,
    }
    view = _view(store, [_summary("no-changes", **lost)])
    assert blocking_reasons(view, {"stack_block_on_lost_tests": block}) == reasons
    if block == "passed":  # the default
        assert blocking_reasons(view, {}) == reasons


def test_lost_coverage_policy_words_are_checked_at_load():
    with pytest.raises(ConfigError, match="'stack_block_on_lost_tests': 'some' is not one of"):
        resolve_policy({"stack_block_on_lost_tests": "some"}, ("stack",))


def test_a_new_failure_keeps_its_traceback_on_the_failing_side_bounded_head_and_tail() -> None:
    frames = "".join(f"app/deep.py:{line}: in step\n" for line in range(2000))
    longrepr = "tests/test_app.py:5: in test_step\n" + frames + "E   AttributeError: gone\n"
    baseline = _run("baseline", {"t::step": TestRecord("passed", 0.01)}, status="passed")
    candidate = _run("candidate", {"t::step": TestRecord("failed", 0.01, "gone", longrepr)})
    [change] = diff_suites(baseline, candidate, Thresholds()).changes
    assert change.baseline["traceback"] == ""
    kept = change.candidate["traceback"]
    assert len(kept) < TRACEBACK_CHARS + 100 < len(longrepr)
    assert kept.startswith("tests/test_app.py:5: in test_step")  # where the test went in
    assert kept.endswith("E   AttributeError: gone\n")  # where it failed
    assert "characters left out" in kept
