"""The Markdown summary reads right as a file, on GitHub and in the terminal: a repr with
angle brackets stays text, never a tag that vanishes or an entity that shows as ``&lt;``."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markdown import Markdown

from torchcanary.diff import report as diff_report
from torchcanary.diff.result import DiffChange, DiffSummary
from torchcanary.report.markdown import time_lines
from torchcanary.report.view import load_run_view
from torchcanary.report_kit.text import literal_text
from torchcanary.results import ComparisonStatus
from torchcanary.section_types import RunView
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

ALIAS = "<alias of torch.compiler.config.compile_on_one_rank>"


def _diff_view(store: SqliteStore) -> RunView:
    run_id = store.create_run({"sections": ["diff"]})
    summary = DiffSummary(ComparisonStatus.CHANGES, total=1, announced=0, unannounced_altering=1)
    change = DiffChange(
        key="default-changed:torch._inductor.config.compile_one_rank",
        verdict=diff_report.ChangeKind("default-changed"),
        symbol="torch._inductor.config.compile_one_rank",
        baseline=False,
        candidate=ALIAS,
        detail=f"default False -> {ALIAS!r}",
        alters_results=True,
    )
    for record in (summary, change):
        row = record.to_json()
        store.save_section_result(
            run_id,
            SectionResult("diff", row["key"], row["env_role"], row["verdict"], row["payload"]),
        )
    return load_run_view(store, run_id)


def test_a_repr_in_angle_brackets_reads_as_itself_in_markdown_and_the_terminal(
    store: SqliteStore,
) -> None:
    """Issue 28 item 11 (a): the diff's Markdown showed ``'&lt;alias of ...>'``; a repr in
    angle brackets is a code span, literal in the file, on GitHub and in the terminal."""
    markdown = diff_report.markdown(_diff_view(store))
    assert "&lt;" not in markdown
    assert f"default False -> '`{ALIAS}`'" in markdown
    console = Console(width=200, color_system=None, file=io.StringIO())
    console.print(Markdown(markdown))
    assert f"default False -> '{ALIAS}'" in console.file.getvalue()  # type: ignore[attr-defined]


def test_literal_text_leaves_plain_comparisons_and_fences_backticks() -> None:
    """Issue 28 item 11 (a): only tag-like ``<...>`` becomes code; a lone ``<`` stays."""
    assert literal_text("ratio < 1.05") == "ratio < 1.05"
    assert literal_text("<a`b>") == "`` <a`b> ``"


def test_the_time_line_names_what_the_run_kept_from_earlier_runs_per_kind(
    store: SqliteStore,
) -> None:
    """Issue 28 item 12: a new candidate against a warm cache keeps the baseline's side
    only; the summary's time line says so in counts (dispatch profiles, rooflines, drill
    references), so a warm figure is read for what it reused."""
    earlier = {"run_id": "20261204-000000-aaaaaa", "made_at": 1.0}
    run_id = store.create_run({"sections": ["bench", "drill"]})
    bench = {
        "ratio": 1.0,
        "ci_low": 0.99,
        "ci_high": 1.01,
        "dispatch": {"baseline": {"ops": {}, "reused": earlier}, "candidate": {"ops": {}}},
        "machine_roofline": {"baseline": {"reused": earlier}, "candidate": {"peak": 1.0}},
    }
    for key in ("gemm/a", "gemm/b"):
        store.save_section_result(run_id, SectionResult("bench", key, "both", "same", bench))
    for role, cached in (("baseline", {"age_s": 60.0}), ("candidate", None)):
        payload = {"ok": True, "cached": cached}
        store.save_section_result(
            run_id, SectionResult("drill", "reference:job", role, "passed", payload)
        )
    store.finish_run(run_id, "go", {"reasons": [], "seconds": {"bench": 40.2, "drill": 9.6}})
    assert time_lines(load_run_view(store, run_id)) == [
        "Time: bench 40 s · drill 10 s.",
        "Reused from earlier runs: 2 of 4 dispatch profiles, 1 of 2 rooflines, "
        "1 of 2 drill references.",
    ]


# A second run of the same candidate names every claim verdict kept in its time line:
# checked with the same two runs in test_claims_reuse.py (issue 28 item 12).
