"""The stack section of the report: a table of changes first, then how each run went, then
the details (where failures part ways, re-runs, timing samples, new warnings, numerics).

Every string that came from a run is escaped; the timing strips are inline SVG.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.results import ComparisonStatus
from torchcanary.section_types import JUnitCase
from torchcanary.stack.diff import VERDICTS
from torchcanary.stack.result import (
    StackChange,
    StackRun,
    StackSummary,
    from_rows,
)
from torchcanary.stack.section import SECTION, blocking_changes, policy_rules

_ROLES = ("baseline", "candidate")
_NOT_RUN = "The stack was not run: no command was given (e.g. --stack 'pytest tests/')."


def _rows(view: Any) -> tuple[dict[str, StackRun], StackSummary | None, list[StackChange]]:
    records = from_rows(view.sections.get(SECTION, []))
    sides = {r.env_role: r for r in records if isinstance(r, StackRun) and r.env_role in _ROLES}
    summary = next((r for r in records if isinstance(r, StackSummary)), None)
    changes = [r for r in records if isinstance(r, StackChange)]
    order = {verdict: index for index, verdict in enumerate(VERDICTS)}
    changes.sort(key=lambda r: (order.get(r.verdict.value, len(order)), r.key))
    return sides, summary, changes


def _determinism(row: StackChange) -> str:
    if not row.verdict.is_new_break:
        return ""
    if row.deterministic is None:
        return "not re-run"
    runs = len(row.reruns.get("candidate", []))
    return f"deterministic ({runs} re-runs)" if row.deterministic else f"flaky ({runs} re-runs)"


def _side_line(role: str, row: StackRun) -> str:
    text = f"{role} (torch {row.torch_version}): {row.verdict}"
    if row.detail:
        text += f" - {row.detail}"
    if row.duration_s:
        text += f" in {row.duration_s:.1f} s"
    if row.stragglers:
        text += f"; killed {len(row.stragglers)} leftover process(es)"
    if row.log_truncated:
        text += f"; output was {row.output_bytes} bytes, log cut short"
    return text


def _timing_svg(durations: dict[str, list[float]]) -> str:
    """Each sample as a dot on one shared seconds axis: baseline above, candidate below."""
    samples = [s for role in _ROLES for s in durations.get(role, [])]
    if not samples:
        return ""
    top = max(samples) * 1.1 or 1.0
    width, left = 320, 70
    dots = []
    for row_index, role in enumerate(_ROLES):
        y = 14 + 18 * row_index
        dots.append(f'<text x="0" y="{y + 4}" font-size="11">{role}</text>')
        for sample in durations.get(role, []):
            x = left + (width - left - 10) * sample / top
            colour = "#4477aa" if role == "baseline" else "#cc6677"
            dots.append(
                f'<circle cx="{x:.1f}" cy="{y}" r="4" fill="{colour}" '
                f'fill-opacity="0.7"><title>{sample:.3f} s</title></circle>'
            )
    dots.append(
        f'<text x="{width - 10}" y="52" font-size="10" text-anchor="end">{top:.2f} s</text>'
    )
    dots.append(f'<text x="{left}" y="52" font-size="10">0 s</text>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="56" '
        f'role="img" aria-label="timing samples">{"".join(dots)}</svg>'
    )


def _detail_lines(row: StackChange) -> list[tuple[str, str]]:
    """(label, text) pairs shown under a change, shared by HTML and Markdown."""
    items: list[tuple[str, str]] = []
    for role in _ROLES:
        side = row.baseline if role == "baseline" else row.candidate
        if side:
            items.append(
                (
                    role,
                    f"{side.get('outcome')} in {side.get('duration_s', 0)} s"
                    + (f": {side['message']}" if side.get("message") else ""),
                )
            )
    if row.also:
        items.append(("also", ", ".join(row.also)))
    lines = row.first_differing_lines
    for role in _ROLES:
        if lines.get(role):
            where = f" (from line {lines['line']})" if lines.get("line") else ""
            items.append((f"{role} output{where}", "\n".join(lines[role])))
    for role, outcomes in row.reruns.items():
        items.append((f"{role} re-runs", ", ".join(outcomes) or "none"))
    for role, samples in row.durations.items():
        items.append((f"{role} seconds", ", ".join(f"{s:.3f}" for s in samples)))
    for warning in row.new_warnings:
        items.append(
            (
                "new warning",
                f"{warning['category']}: {warning['message']} ({warning.get('location', '')})",
            )
        )
    numerics = row.numerics
    if numerics:
        items.append(
            (
                "numerics",
                f"{numerics.get('dtype', '')} {numerics.get('shape', '')}: "
                f"max abs {numerics.get('max_abs_err')}, max rel "
                f"{numerics.get('max_rel_err')}, {numerics.get('max_ulps')} "
                f"ULPs, beyond tolerance {numerics.get('beyond_tolerance')}, "
                f"NaN {numerics.get('nan')}, Inf {numerics.get('inf')}, "
                f"worst {numerics.get('worst_values')}",
            )
        )
    return items


def html(view: Any) -> str:
    sides, summary, changes = _rows(view)
    parts = ['<section class="stack"><h2>Your stack</h2>']
    if summary is None and not sides:
        return parts[0] + f"<p>{escape(_NOT_RUN)}</p></section>"
    if summary is not None:
        parts.append(
            f"<p>Command: <code>{escape(summary.command)}"
            f"</code>. {escape(_counts_line(summary))}</p>"
        )
    parts.append(
        "<ul>"
        + "".join(
            f"<li>{escape(_side_line(role, sides[role]))}</li>" for role in _ROLES if role in sides
        )
        + "</ul>"
    )
    if changes:
        parts.append(
            "<table><thead><tr><th>Change</th><th>Test</th><th>Detail</th>"
            "<th>Re-runs</th></tr></thead><tbody>"
        )
        for row in changes:
            parts.append(
                f"<tr><td>{escape(row.verdict)}</td><td><code>{escape(row.key)}</code>"
                + _reproduce_html(view, row.key)
                + f"</td><td>{escape(row.detail)}</td>"
                f"<td>{escape(_determinism(row))}</td></tr>"
            )
        parts.append("</tbody></table>")
        for row in changes:
            parts.append(
                f"<details><summary>{escape(row.verdict)}: <code>{escape(row.key)}"
                "</code></summary><dl>"
            )
            for label, text in _detail_lines(row):
                parts.append(f"<dt>{escape(label)}</dt><dd><pre>{escape(text)}</pre></dd>")
            parts.append("</dl>" + _timing_svg(row.durations) + "</details>")
    parts.extend(f"<p>{escape(line)}</p>" for line in _one_sided(summary))
    parts.append("</section>")
    return "".join(parts)


def _reproducer(view: Any, key: str) -> str:
    """The link to a changed test's verified reproducer (``torchcanary repro``), relative
    to the run's output folder; empty when it has none."""
    folder = view.reproducers.get(f"{SECTION}:{key}")
    return f"{folder}/repro.py" if folder else ""


def _reproduce_html(view: Any, key: str) -> str:
    link = _reproducer(view, key)
    return f' <a class="reproduce" href="{escape(link)}">Reproduce</a>' if link else ""


def _reproduce_markdown(view: Any, key: str) -> str:
    link = _reproducer(view, key)
    return f" ([Reproduce]({link}))" if link else ""


def _counts_line(summary: StackSummary) -> str:
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return f"No comparison: {summary.reason or ''}"
    counts = summary.counts or {}
    shown = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts.get(v))
    return f"{shown or 'nothing ran'}; re-runs per environment: {summary.reruns}."


def _one_sided(summary: StackSummary | None) -> list[str]:
    if summary is None:
        return []
    lines = []
    for role in _ROLES:
        names, count = summary.only_in(role)
        if count:
            listed = ", ".join(names)
            lines.append(
                f"{count} test(s) seen only in the {role}'s run "
                f"(not collected or not reached in the other): {listed}"
            )
    return lines


def markdown(view: Any) -> str:
    sides, summary, changes = _rows(view)
    out = ["## Your stack", ""]
    if summary is None and not sides:
        return "\n".join([*out, _NOT_RUN, ""])
    if summary is not None:
        out += [f"Command: `{summary.command}`. {_counts_line(summary)}", ""]
    out += [f"- {_side_line(role, sides[role])}" for role in _ROLES if role in sides]
    out.append("")
    if changes:
        out += ["| Change | Test | Detail | Re-runs |", "|---|---|---|---|"]
        out += [
            f"| {row.verdict} | `{_cell(row.key)}`{_reproduce_markdown(view, row.key)} | "
            f"{_cell(row.detail)} | {_determinism(row)} |"
            for row in changes
        ]
        out.append("")
        for row in changes:
            out += [f"### {row.verdict}: `{row.key}`", ""]
            for label, text in _detail_lines(row):
                if "\n" in text:
                    out += [f"{label}:", "```", text, "```"]
                else:
                    out.append(f"- {label}: {text}")
            out.append("")
    out += [*_one_sided(summary), ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]


def junit_cases(view: Any) -> list[JUnitCase]:
    """A case per environment's run and per change; a change fails when the run's own policy
    (as stored with it) makes it part of a no-go, so JUnit and the decision agree."""
    sides, summary, changes = _rows(view)
    blocked = blocking_changes(changes, policy_rules(view.run.plan.get("policy")))
    cases = []
    for role in _ROLES:
        if role in sides:
            run = sides[role]
            cases.append(
                JUnitCase(
                    "torchcanary.stack",
                    f"{role}: run the stack",
                    "passed" if run.verdict.ran else "error",
                    float(run.duration_s or 0.0),
                    message=_side_line(role, run),
                )
            )
    if summary is not None and summary.verdict is ComparisonStatus.NOT_COMPARED:
        cases.append(
            JUnitCase(
                "torchcanary.stack",
                "compare baseline and candidate",
                "error",
                message=summary.reason or "",
            )
        )
    for row in changes:
        blocking = row.key in blocked
        text = "\n".join(f"{label}: {value}" for label, value in _detail_lines(row))
        cases.append(
            JUnitCase(
                "torchcanary.stack",
                f"{row.verdict}: {row.key}",
                "failure" if blocking else "passed",
                message=row.detail,
                text=text,
            )
        )
    return cases
