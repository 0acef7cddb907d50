"""The Markdown summary reads right as a file, on GitHub and in the terminal: a repr with
angle brackets stays text, never a tag that vanishes or an entity that shows as ``&lt;``."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markdown import Markdown

from torchcanary.report.markdown import literal_text
from torchcanary.report.view import RunView
from torchcanary.store.sqlite import SectionResult, Store
from torchcanary.surface import report as diff_report
from torchcanary.surface.result import DiffChange, DiffStatus, DiffSummary

ALIAS = "<alias of torch.compiler.config.compile_on_one_rank>"


def _diff_view(store: Store) -> RunView:
    run_id = store.create_run({"sections": ["diff"]})
    summary = DiffSummary(DiffStatus.CHANGES, total=1, announced=0, unannounced_altering=1)
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
    return RunView.load(store, run_id)


def test_a_repr_in_angle_brackets_reads_as_itself_in_markdown_and_the_terminal(
    store: Store,
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
