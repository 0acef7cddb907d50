"""The stack section of the report: a table of changes first, then how each run went, then
the details (where failures part ways, re-runs, timing samples, new warnings, numerics).

Every string that came from a run is escaped; the timing strips are inline SVG.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.report.junit import JUnitCase
from torchcanary.stack.diff import NEW_BREAKS, VERDICTS
from torchcanary.stack.section import (
    BOTH,
    SECTION,
    SUMMARY_KEY,
    blocking_changes,
    policy_rules,
)
from torchcanary.store.sqlite import SectionResult

_ROLES = ("baseline", "candidate")
_NOT_RUN = "The stack was not run: no command was given (e.g. --stack 'pytest tests/')."


def _rows(view: Any) -> tuple[dict[str, SectionResult], SectionResult | None, list[SectionResult]]:
    rows: list[SectionResult] = view.sections.get(SECTION, [])
    sides = {r.env_role: r for r in rows if r.key == SUMMARY_KEY and r.env_role in _ROLES}
    summary = next((r for r in rows if r.key == SUMMARY_KEY and r.env_role == BOTH), None)
    changes = [r for r in rows if r.key != SUMMARY_KEY]
    order = {verdict: index for index, verdict in enumerate(VERDICTS)}
    changes.sort(key=lambda r: (order.get(r.verdict, len(order)), r.key))
    return sides, summary, changes


def _determinism(row: SectionResult) -> str:
    if row.verdict not in NEW_BREAKS:
        return ""
    deterministic = row.payload.get("deterministic")
    if deterministic is None:
        return "not re-run"
    reruns = row.payload.get("reruns", {})
    runs = len(reruns.get("candidate", []))
    return f"deterministic ({runs} re-runs)" if deterministic else f"flaky ({runs} re-runs)"


def _side_line(role: str, row: SectionResult) -> str:
    payload = row.payload
    text = f"{role} (torch {payload.get('torch_version', '?')}): {row.verdict}"
    if payload.get("detail"):
        text += f" - {payload['detail']}"
    if payload.get("duration_s"):
        text += f" in {payload['duration_s']:.1f} s"
    if payload.get("stragglers"):
        text += f"; killed {len(payload['stragglers'])} leftover process(es)"
    if payload.get("log_truncated"):
        text += f"; output was {payload.get('output_bytes', 0)} bytes, log cut short"
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


def _detail_lines(row: SectionResult) -> list[tuple[str, str]]:
    """(label, text) pairs shown under a change, shared by HTML and Markdown."""
    payload = row.payload
    items: list[tuple[str, str]] = []
    for role in _ROLES:
        side = payload.get(role) or {}
        if side:
            items.append(
                (
                    role,
                    f"{side.get('outcome')} in {side.get('duration_s', 0)} s"
                    + (f": {side['message']}" if side.get("message") else ""),
                )
            )
    if payload.get("also"):
        items.append(("also", ", ".join(payload["also"])))
    lines = payload.get("first_differing_lines") or {}
    for role in _ROLES:
        if lines.get(role):
            where = f" (from line {lines['line']})" if lines.get("line") else ""
            items.append((f"{role} output{where}", "\n".join(lines[role])))
    for role, outcomes in (payload.get("reruns") or {}).items():
        items.append((f"{role} re-runs", ", ".join(outcomes) or "none"))
    for role, samples in (payload.get("durations") or {}).items():
        items.append((f"{role} seconds", ", ".join(f"{s:.3f}" for s in samples)))
    for warning in payload.get("new_warnings") or ():
        items.append(
            (
                "new warning",
                f"{warning['category']}: {warning['message']} ({warning.get('location', '')})",
            )
        )
    numerics = payload.get("numerics")
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
            f"<p>Command: <code>{escape(str(summary.payload.get('command', '')))}"
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
                f"<tr><td>{escape(row.verdict)}</td><td><code>{escape(row.key)}"
                f"</code></td><td>{escape(str(row.payload.get('detail', '')))}</td>"
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
            parts.append("</dl>" + _timing_svg(row.payload.get("durations") or {}) + "</details>")
    parts.extend(f"<p>{escape(line)}</p>" for line in _one_sided(summary))
    parts.append("</section>")
    return "".join(parts)


def _counts_line(summary: SectionResult) -> str:
    if summary.verdict == "not-compared":
        return f"No comparison: {summary.payload.get('reason', '')}"
    counts = summary.payload.get("counts", {})
    shown = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts.get(v))
    return f"{shown or 'nothing ran'}; re-runs per environment: {summary.payload.get('reruns')}."


def _one_sided(summary: SectionResult | None) -> list[str]:
    if summary is None:
        return []
    lines = []
    for role in _ROLES:
        count = summary.payload.get(f"only_in_{role}_count", 0)
        if count:
            listed = ", ".join(summary.payload.get(f"only_in_{role}", []))
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
        out += [f"Command: `{summary.payload.get('command', '')}`. {_counts_line(summary)}", ""]
    out += [f"- {_side_line(role, sides[role])}" for role in _ROLES if role in sides]
    out.append("")
    if changes:
        out += ["| Change | Test | Detail | Re-runs |", "|---|---|---|---|"]
        out += [
            f"| {row.verdict} | `{_cell(row.key)}` | {_cell(str(row.payload.get('detail')))}"
            f" | {_determinism(row)} |"
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
            row = sides[role]
            ran = row.verdict not in ("install-failed", "not-found")
            cases.append(
                JUnitCase(
                    "torchcanary.stack",
                    f"{role}: run the stack",
                    "passed" if ran else "error",
                    float(row.payload.get("duration_s") or 0.0),
                    message=_side_line(role, row),
                )
            )
    if summary is not None and summary.verdict == "not-compared":
        cases.append(
            JUnitCase(
                "torchcanary.stack",
                "compare baseline and candidate",
                "error",
                message=str(summary.payload.get("reason", "")),
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
                message=str(row.payload.get("detail", "")),
                text=text,
            )
        )
    return cases
