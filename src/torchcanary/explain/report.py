"""The explain section's report parts: a "Why" block per finding, in HTML, Markdown and
the terminal (through the Markdown), and ``explanations`` in ``results.json``.

Every share is shown with its interval; what no cause accounts for is its own line,
"unexplained"; what was not measured says why; the seconds spent are shown.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.explain.cause import SECTION, Explanation, share_text
from torchcanary.explain.result import from_rows
from torchcanary.section_types import JUnitCase, RunView

_TITLE = "Why: what moved, why, and what would undo it"
_SHOWN_CAUSES = 8
_SHOWN_WITHIN = 3  # detail lines shown under each cause


def explanations(view: RunView) -> list[Explanation]:
    return from_rows(view.sections.get(SECTION, []))[1]


def _spent(view: RunView, found: list[Explanation]) -> str:
    summary = from_rows(view.sections.get(SECTION, []))[0]
    spent = sum(e.seconds for e in found)
    if summary is None:
        return f"{len(found)} finding(s) explained in {spent:.0f} s"
    return (
        f"{len(found)} finding(s) explained in {summary.seconds:.0f} s "
        f"(--explain {summary.mode}, "
        + ("no budget cap)" if summary.budget_s is None else f"budget {summary.budget_s:.0f} s)")
    )


def _lines(explanation: Explanation) -> list[str]:
    """The Why block of one finding as plain lines (Markdown list items without the dash)."""
    lines = []
    for cause in explanation.causes[:_SHOWN_CAUSES]:
        lines.append(f"{cause.describe()}. {cause.evidence}".rstrip())
        # Overlapping views (a library inside the build's part) are detail, not shares; a
        # few under each part, so the parts that add up are all shown.
        within = cause.detail.get("within", [])
        lines += [f"within {cause.name}: {line}" for line in within[:_SHOWN_WITHIN]]
        if len(within) > _SHOWN_WITHIN:
            lines.append(
                f"within {cause.name}: ... {len(within) - _SHOWN_WITHIN} more in results.json"
            )
    if len(explanation.causes) > _SHOWN_CAUSES:
        lines.append(f"... {len(explanation.causes) - _SHOWN_CAUSES} more causes in results.json")
    if explanation.unexplained is not None:
        lines.append(
            "unexplained: "
            + share_text(
                explanation.unexplained, explanation.unexplained_low, explanation.unexplained_high
            )
        )
    lines += [f"not checked: {reason}" for reason in explanation.not_checked]
    return lines


def markdown(view: RunView) -> str:
    found = explanations(view)
    if not found:
        return ""
    out = [f"## {_TITLE}", "", _spent(view, found), ""]
    for explanation in found:
        out.append(
            f"### Why {explanation.section} `{explanation.item}` moved "
            f"({explanation.delta}): {explanation.verdict}"
        )
        out += [f"- {line}" for line in _lines(explanation)]
        reproduce = [c.reproduce for c in explanation.causes if c.reproduce]
        if reproduce:
            out.append(f"- reproduce: `{reproduce[0]}`")
        out.append("")
    return "\n".join(out)


def html(view: RunView) -> str:
    found = explanations(view)
    if not found:
        return ""
    parts = [f"<section id='explain'><h2>{escape(_TITLE)}</h2><p>{escape(_spent(view, found))}</p>"]
    for explanation in found:
        parts.append(
            f"<details open><summary>Why {escape(explanation.section)} "
            f"<code>{escape(explanation.item)}</code> moved ({escape(explanation.delta)}): "
            f"{escape(str(explanation.verdict))}</summary><ul>"
            + "".join(f"<li>{escape(line)}</li>" for line in _lines(explanation))
            + "</ul></details>"
        )
    return "".join(parts) + "</section>"


def junit_cases(view: RunView) -> list[JUnitCase]:
    """None: an explanation is no test of the release."""
    return []


def json_parts(view: RunView) -> dict[str, Any]:
    """``explanations``: one per finding (docs/json-schema.md)."""
    found = explanations(view)
    return {"explanations": [e.to_json() for e in found]} if found else {}
