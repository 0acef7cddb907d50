"""The core's rule: a run whose planned units did not all end checked never says go.

Each section plans its units from the plan and declares its checked verdicts; the core
(``accounting.py``) finds the units left unchecked, the decision objects to them by
default, and ``block_on_not_run = false`` turns the objection into a warning every report
still shows, with "go with N units not checked" as its first line.
"""

from __future__ import annotations

import io
import json
import time

import pytest
from rich.console import Console

from torchcanary.calls.result import CallsSummary, SummaryStatus
from torchcanary.calls.section import call_set_summary
from torchcanary.claims.records import save_probe_result
from torchcanary.commands.summary import print_verdict
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.policy import decide, resolve_policy
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.report.json_out import render_json
from torchcanary.report.junit import render_junit
from torchcanary.report.markdown import render_markdown
from torchcanary.report.page import render_html
from torchcanary.report.view import load_run_view
from torchcanary.sections import get_section
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

NEVER_STRUCK = "the job never reached step 12 on rank 1, so no fault was injected"
DRILLS = ("kill:restart-unshared", "hang:timeout")
DRILL_PLAN = RunPlan(
    "torch==2.13.0", "torch==2.14.1", ("drill",), settings={"drill": {"faults": list(DRILLS)}}
)
PROBE = "sanity.version-pin"  # a probe of the built-in sanity pack, planned by any plan


def _drill_run(store: SqliteStore, verdict: str, reason: str) -> str:
    """A run whose drills all ended with ``verdict`` in both environments."""
    run_id = store.create_run(DRILL_PLAN.to_json())
    for key in DRILLS:
        for role in ("baseline", "candidate"):
            store.save_section_result(
                run_id, SectionResult("drill", key, role, verdict, {"reason": reason})
            )
    return run_id


def _finish(store: SqliteStore, run_id: str, policy: dict[str, object], sections: tuple[str, ...]):
    view = load_run_view(store, run_id)
    decision = decide(view, resolve_policy(policy, sections), sections, {})
    store.finish_run(run_id, decision.label, decision.to_json())
    return decision, load_run_view(store, run_id)


def test_drills_that_all_errored_say_no_go_naming_each_drill_and_its_first_error(
    store: SqliteStore,
) -> None:
    """Issue 28 item 1: every drill `error` (no fault injected) used to answer go."""
    decision, view = _finish(store, _drill_run(store, "error", NEVER_STRUCK), {}, ("drill",))
    assert not decision.go and decision.not_checked == 4
    (reason,) = decision.reasons
    assert reason.startswith("section drill: 4 planned unit(s) not checked")
    for key in DRILLS:
        for role in ("baseline", "candidate"):
            assert f"{key} ({role}, trial 1) error: {NEVER_STRUCK}" in reason
    markdown = render_markdown(view, ("drill",))
    assert "**no-go**" in markdown and NEVER_STRUCK in markdown


def test_a_policy_may_let_items_that_did_not_run_through_but_every_report_says_so(
    store: SqliteStore,
) -> None:
    """Issue 28 item 1: ``block_on_not_run = false`` warns; the reason is still shown."""
    run_id = _drill_run(store, "error", NEVER_STRUCK)
    decision, view = _finish(store, run_id, {"block_on_not_run": False}, ("drill",))
    assert decision.go and decision.reasons == ()
    (warning,) = decision.warnings
    assert "4 planned unit(s) not checked" in warning and warning.endswith(
        "(not blocking: block_on_not_run = false)"
    )
    markdown = render_markdown(view, ("drill",))
    assert markdown.splitlines()[0] == "# torchcanary: **go with 4 units not checked**"
    assert f"warning: {warning}" in markdown
    html = render_html(view, ("drill",))
    assert "Warnings the policy lets through" in html
    assert "<strong>go with 4 units not checked</strong>" in html
    junit = render_junit(view, ("drill",))
    assert "go with 4 units not checked, with 1 warning(s) the policy lets through" in junit
    written = json.loads(json.dumps(render_json(view), default=str))
    assert written["decision_detail"]["warnings"] == [warning]


def test_honest_unknowns_are_shown_not_blocking(store: SqliteStore) -> None:
    """Issue 28 item 1: "not checkable here" stays an unknown, not a drill that did not run."""
    run_id = _drill_run(store, "not-checkable", "no second GPU here")
    decision, _ = _finish(store, run_id, {}, ("drill",))
    assert decision.go and decision.warnings == () and decision.not_checked == 0


@pytest.mark.parametrize("verdict", ["error", "crashed", "timeout"])
def test_a_claim_the_candidate_could_not_check_blocks(store: SqliteStore, verdict: str) -> None:
    """Issue 28 item 1: a probe that broke in the candidate says nothing of the claim."""
    plan = RunPlan(
        "torch==2.13.0", "torch==2.14.1", ("claims",), settings={"claims": {"probes": [PROBE]}}
    )
    run_id = store.create_run(plan.to_json())
    for role, outcome in (
        ("baseline", Outcome(Verdict.REFUTED, "not in this version")),
        ("candidate", Outcome(Verdict(verdict), "ImportError: no module named numpy")),
    ):
        save_probe_result(store, ProbeResult(run_id, role, PROBE, outcome, 1.0, time.time()))
    decision, _ = _finish(store, run_id, {}, ("claims",))
    assert decision.reasons == (
        "section claims: 1 planned unit(s) not checked, so they say nothing about the "
        f"candidate: {PROBE} (candidate) {verdict}: ImportError: no module named numpy",
    )


def test_a_retired_policy_key_names_the_key_that_replaced_it() -> None:
    """Issue 28 item 1: the sections' own "did not run" keys gave way to the core's."""
    with pytest.raises(ConfigError, match="'bench_block_on_candidate_failure' is retired"):
        resolve_policy({"bench_block_on_candidate_failure": True}, ("bench",))


def test_the_last_line_of_a_go_with_warnings_says_so(store: SqliteStore) -> None:
    """Issue 28 item 1: the terminal's verdict line of a go the policy let through with a
    warning names the warning; "no policy objected" would read as a clean go."""
    run_id = _drill_run(store, "error", NEVER_STRUCK)
    decision, _ = _finish(store, run_id, {"block_on_not_run": False}, ("drill",))
    out = io.StringIO()
    assert print_verdict(Console(file=out, width=80), decision, {}, {}) == 0
    (line,) = out.getvalue().splitlines()
    assert line.startswith(
        "verdict: go with 4 units not checked (exit 0) with warnings: section drill: 4 planned"
    )
    assert "no policy objected" not in line


# issue 38: every section's planned units, the calls and the explain included --------------
def _one_section_run(store: SqliteStore, section: str, table: dict[str, object]) -> str:
    settings = {section: get_section(section).parse_settings(table)}
    plan = RunPlan("torch==2.13.0", "torch==2.14.1", (section,), settings=settings)
    return store.create_run(plan.to_json())


def test_a_calls_run_that_recorded_nothing_is_no_go_naming_why(store: SqliteStore) -> None:
    """Issue 38 item 1: a call set never recorded used to answer go with no warning."""
    run_id = _one_section_run(store, "calls", {"command": "pytest -q"})
    why = "no recording was written (your command: exited with status 2; see /tmp/calls)"
    summary = CallsSummary(SummaryStatus.NOT_CHECKED, "your command", why)
    store.save_section_result(run_id, SectionResult.of("calls", summary))
    decision, _ = _finish(store, run_id, {}, ("calls",))
    assert decision.reasons == (
        "section calls: 1 planned unit(s) not checked, so they say nothing about the "
        f"candidate: __summary__ (both) not-checked: {why}",
    )
    relaxed, _ = _finish(store, run_id, {"block_on_not_run": False}, ("calls",))
    assert relaxed.headline == "go with 1 unit not checked"


def test_a_call_set_with_a_replay_that_broke_off_is_incomplete_and_not_checked(
    store: SqliteStore,
) -> None:
    """Issue 38 item 1: a call that crashed or timed out in the candidate was filed "not
    replayable", which never blocked; it compared nothing, so the set is not checked."""
    counts = {"same": 4, "not-run": 1, "not-replayable": 1}
    summary = call_set_summary("your command", "exited 0", 6, counts, {"a Generator": 1})
    assert (summary.verdict, summary.replayed) == (SummaryStatus.INCOMPLETE, 4)
    assert summary.verdict.value not in get_section("calls").checked_verdicts
    run_id = _one_section_run(store, "calls", {"command": "pytest -q"})
    store.save_section_result(run_id, SectionResult.of("calls", summary))
    decision, _ = _finish(store, run_id, {}, ("calls",))
    assert decision.reasons == (
        "section calls: 1 planned unit(s) not checked, so they say nothing about the "
        "candidate: __summary__ (both) incomplete: 1 call(s) were not replayed to the end "
        "in both versions (not-run)",
    )
    clean = call_set_summary("your command", "exited 0", 5, {"same": 5}, {})
    assert clean.verdict is SummaryStatus.NO_CHANGES


def test_an_explain_pass_that_stored_nothing_is_a_unit_not_checked(store: SqliteStore) -> None:
    """Issue 38 item 1: the explain section declared no undone work at all."""
    run_id = _one_section_run(store, "explain", {})
    decision, _ = _finish(store, run_id, {}, ("explain",))
    assert decision.reasons == (
        "section explain was asked for but stored no results",
        "section explain: 1 planned unit(s) not checked, so they say nothing about the "
        "candidate: __summary__ (both) no verdict stored",
    )


def test_errored_trials_of_a_flaky_drill_are_trials_that_did_not_run(store: SqliteStore) -> None:
    """Issue 38 item 3: two errored trials and one pass in the candidate against three
    passes in the baseline answered go (flaky) with no warning, and no key could block."""
    run_id = _one_section_run(store, "drill", {"faults": ["hang:timeout"], "trials": 3})
    trial = {"verdict": "passed", "reason": None, "first_error": None, "duration_s": 1.0}
    errored = {**trial, "verdict": "error", "reason": NEVER_STRUCK}
    for role, trials, verdict in (
        ("baseline", [trial, trial, trial], "passed"),
        ("candidate", [errored, trial, errored], "flaky"),
    ):
        payload = {"reason": "", "trials": trials}
        store.save_section_result(
            run_id, SectionResult("drill", "hang:timeout", role, verdict, payload)
        )
    decision, _ = _finish(store, run_id, {}, ("drill",))
    assert decision.reasons == (
        "section drill: 2 planned unit(s) not checked, so they say nothing about the "
        f"candidate: hang:timeout (candidate, trial 1) error: {NEVER_STRUCK}; "
        f"hang:timeout (candidate, trial 3) error: {NEVER_STRUCK}",
    )
