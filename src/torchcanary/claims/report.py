"""The claims part of every output: a row per claim, both verdicts, the evidence, plots."""

from __future__ import annotations

import json
import statistics
from html import escape

from torchcanary.report.junit import JUnitCase
from torchcanary.report.svg import grouped_bars
from torchcanary.report.view import ClaimRow, RunView
from torchcanary.results import ProbeResult, Verdict

_CANDIDATE_STATUS = {
    Verdict.CONFIRMED: "passed",
    Verdict.REFUTED: "failure",
    Verdict.ABSENT: "failure",
    Verdict.NOT_CHECKABLE: "skipped",
    Verdict.ERROR: "error",
    Verdict.CRASHED: "error",
    Verdict.TIMEOUT: "error",
}
# The claims describe the new release: in the baseline, their absence is expected.
_BASELINE_STATUS = _CANDIDATE_STATUS | {Verdict.REFUTED: "skipped", Verdict.ABSENT: "skipped"}


def _badge(text: str) -> str:
    css = text.replace(" ", "-")
    return f'<span class="badge {escape(css)}">{escape(text)}</span>'


def _cell(result: ProbeResult | None) -> str:
    if result is None:
        return "<td>not run</td>"
    outcome = result.outcome
    return (
        f'<td>{_badge(outcome.verdict.value)}<div class="summary">'
        f"{escape(outcome.summary)}</div></td>"
    )


def _evidence(row: ClaimRow) -> str:
    parts = []
    for result in (row.baseline, row.candidate):
        if result is None:
            continue
        text = json.dumps(result.outcome.evidence, indent=2, default=str, sort_keys=True)
        parts.append(
            f"<h4>{escape(result.env_role)} ({result.duration_s:.1f} s)</h4>"
            f"<pre>{escape(text)}</pre>"
        )
    plot = _measurement_plot(row)
    return f"<details><summary>evidence</summary>{plot}{''.join(parts)}</details>" if parts else ""


def _measurement_plot(row: ClaimRow) -> str:
    series: dict[str, dict[str, float]] = {}
    for result in (row.baseline, row.candidate):
        if result is None:
            continue
        for name, values in result.outcome.measurements.items():
            if values:
                series.setdefault(name, {})[result.env_role] = statistics.median(values)
    if not series:
        return ""
    return grouped_bars(f"{row.probe_id}: medians", sorted(series.items()))


def html(view: RunView) -> str:
    rows = []
    for row in view.claim_rows():
        description = row.description
        comparison = row.comparison.value if row.comparison else "incomplete"
        quote = description.get("release_claim", "")
        rows.append(
            f'<tr id="claim-{escape(row.probe_id)}"><td><code>{escape(row.probe_id)}'
            f"</code></td><td>{escape(description.get('claim', ''))}"
            + (f'<div class="quote">release: “{escape(quote)}”</div>' if quote else "")
            + f'<div class="needs">scope {escape(str(description.get("scope", "")))}; '
            f"needs {escape(str(description.get('needs', '')))}</div>{_evidence(row)}</td>"
            f"{_cell(row.baseline)}{_cell(row.candidate)}<td>{_badge(comparison)}</td></tr>"
        )
    return (
        '<section id="claims"><h2>Claims</h2><table class="claims"><thead><tr>'
        "<th>probe</th><th>claim</th><th>baseline</th><th>candidate</th><th>upgrade</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def markdown(view: RunView) -> str:
    lines = ["## Claims", "", "| probe | baseline | candidate | upgrade |", "|---|---|---|---|"]
    for row in view.claim_rows():
        base = row.baseline.outcome.verdict.value if row.baseline else "not run"
        cand = row.candidate.outcome.verdict.value if row.candidate else "not run"
        comparison = row.comparison.value if row.comparison else "incomplete"
        lines.append(f"| `{row.probe_id}` | {base} | {cand} | {comparison} |")
    return "\n".join(lines) + "\n"


def junit_cases(view: RunView) -> list[JUnitCase]:
    cases = []
    for result in view.probe_results:
        statuses = _CANDIDATE_STATUS if result.env_role == "candidate" else _BASELINE_STATUS
        outcome = result.outcome
        detail = json.dumps(outcome.evidence, indent=1, default=str)[:20000]
        cases.append(
            JUnitCase(
                suite=f"claims.{result.env_role}",
                name=result.probe_id,
                status=statuses[outcome.verdict],
                time_s=result.duration_s,
                message=f"{outcome.verdict.value}: {outcome.summary}",
                text=detail,
            )
        )
    return cases
