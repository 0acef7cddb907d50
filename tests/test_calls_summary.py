"""The calls section's count of what it compared by value: the share on the section's first
line, the calls compared by metadata only counted by why, and a call set compared too little
held back from a go (``calls_min_compared``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from torchcanary.calls.compare import CallVerdict, Replay, compare_call
from torchcanary.calls.report import markdown
from torchcanary.calls.section import SECTION, blocking_reasons, call_set_summary
from torchcanary.commands.summary import print_summary
from torchcanary.report.markdown import render_markdown
from torchcanary.report.view import load_run_view
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

TOO_LARGE = "values budget of 1073741824 bytes spent"


def _large_output() -> Replay:
    tensor = {"t": "tensor", "dtype": "torch.float32", "shape": [5000], "stride": [1]}
    line = {"status": "returned", "outputs": [{**tensor, "data": None, "why_no_data": TOO_LARGE}]}
    return Replay.from_json(line)


def test_a_call_whose_output_values_were_not_kept_is_same_by_metadata_only_and_says_why() -> None:
    found = compare_call(_large_output(), _large_output(), control=_large_output())
    assert (found.verdict, found.metadata_only) == (CallVerdict.SAME, TOO_LARGE)
    empty = Replay.from_json(
        {"status": "returned", "outputs": [{"t": "tensor", "data": {"b64": "AAAAAA=="}}]},
        values_defined=False,
    )
    uninitialised = compare_call(empty, empty).metadata_only
    assert uninitialised == "uninitialised memory (torch.empty and kin)"


def _view(metadata_only: dict[str, int]) -> Any:
    counts = {"same": 9, "not-replayable": 1}
    summary = call_set_summary("pytest -q", "passed", 10, counts, {"a Generator": 1}, metadata_only)
    return SimpleNamespace(sections={SECTION: [SectionResult.of(SECTION, summary)]})


def test_a_call_set_compared_by_value_below_the_minimum_is_not_a_go() -> None:
    view = _view({TOO_LARGE: 3})
    assert blocking_reasons(view, {}) == [
        "calls: only 60% of the 10 recorded call(s) were compared by value (6), under "
        "calls_min_compared (90%)"
    ]
    assert blocking_reasons(view, {"calls_min_compared": 0.5}) == []
    assert blocking_reasons(_view({}), {}) == []  # 90 % compared: enough


def test_the_share_compared_leads_the_calls_in_summary_md_and_the_terminal(
    tmp_path: Path,
) -> None:
    summary = call_set_summary(
        "pytest -q", "passed", 10, {"same": 9, "not-replayable": 1}, {"a Generator": 1}, {}
    )
    with SqliteStore(tmp_path / "canary.db") as store:
        run_id = store.create_run({"sections": [SECTION]})
        store.save_section_result(run_id, SectionResult.of(SECTION, summary))
        view = load_run_view(store, run_id)
        console = Console(record=True, width=400)
        print_summary(console, store, run_id)
    written = render_markdown(view, (SECTION,)).splitlines()
    first = written[written.index("## Your calls, replayed") + 2]
    expected = "9 of 10 recorded calls compared (90%) by value; by metadata only: none; "
    assert first.startswith(expected)
    printed = [line.strip() for line in console.export_text().splitlines() if line.strip()]
    assert printed[1].startswith(expected)  # the line after the calls' heading


def test_what_was_not_followed_while_recording_is_named_on_the_first_line() -> None:
    summary = call_set_summary("pytest -q", "passed", 10, {"same": 10}, {}, {})
    summary = dataclasses.replace(summary, not_followed={"forked process(es)": 2})
    view = SimpleNamespace(sections={SECTION: [SectionResult.of(SECTION, summary)]})
    first = markdown(view).splitlines()[2]
    assert first.startswith(
        "10 of 10 recorded calls compared (100%) by value; by metadata only: none; "
        "not followed while recording: 2 forked process(es); "
    )


def test_the_calls_counted_past_their_sites_sample_are_named_on_the_first_line() -> None:
    summary = call_set_summary("pytest -q", "passed", 10, {"same": 10}, {}, {})
    by_callable = {f"torch.op{i}": 1 for i in range(11)} | {"torch.sum": 2637677}
    summary = dataclasses.replace(summary, not_sampled=2637688, not_sampled_by=by_callable)
    view = SimpleNamespace(sections={SECTION: [SectionResult.of(SECTION, summary)]})
    shown = markdown(view).splitlines()
    assert (
        "10 distinct call(s) recorded under the baseline (a bounded sample of each site's "
        "calls: 2637688 more counted, not replayed), 10 replayed in both versions, " in shown[2]
    )
    # the detail names the callables counted past their samples, most first
    (title,) = [i for i, line in enumerate(shown) if line.startswith("### Counted past their")]
    assert shown[title + 2 : title + 4] == [
        "- `torch.sum: 2637677 call(s)`",
        "- `torch.op0: 1 call(s)`",
    ]
    assert shown[title + 12] == "- `2 more callable(s): 2 call(s)`"


def test_the_calls_counted_while_the_recorder_rested_are_said_on_the_first_line() -> None:
    summary = call_set_summary("pytest -q", "passed", 10, {"same": 10}, {}, {})
    summary = dataclasses.replace(summary, not_examined=9505178)
    view = SimpleNamespace(sections={SECTION: [SectionResult.of(SECTION, summary)]})
    assert (
        "10 distinct call(s) recorded under the baseline (9505178 more counted while the "
        "recorder rested, after calls that met no new kind of call: one among them that a "
        "glance could not tell from those before is not recorded), 10 replayed"
        in markdown(view).splitlines()[2]
    )


def test_what_the_diff_says_of_a_call_is_read_from_its_stored_rows_in_its_own_words() -> None:
    """The calls link a changed call to the diff's change of the same symbol, read from the
    diff's stored rows (their JSON), never its code: the verdict in its stored word, not
    an enum's name."""
    from torchcanary.calls.report import announced
    from torchcanary.diff.changes import ChangeKind
    from torchcanary.diff.result import DiffChange

    removed = DiffChange(
        key="api:torch.cholesky",
        verdict=ChangeKind.API_REMOVED,
        symbol="torch.cholesky",
        detail="gone in 2.14",
        mentions=("deprecated since 1.9",),
    )
    unnamed = DiffChange(key="api:new", verdict=ChangeKind.API_ADDED, detail="new")
    view = SimpleNamespace(
        sections={"diff": [SectionResult.of("diff", c) for c in (removed, unnamed)]}
    )
    assert announced(view) == {
        "torch.cholesky": "api-removed: gone in 2.14 (notes: deprecated since 1.9)"
    }
