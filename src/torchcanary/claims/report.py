"""The claims part of every output: a row per claim, both verdicts, the evidence, plots."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from html import escape
from typing import Any

from rich.table import Table
from rich.text import Text

from torchcanary.claims.kept_verdicts import reused_from
from torchcanary.claims.repro import SECTION
from torchcanary.claims.view import ClaimRow, claims_of
from torchcanary.kept import describe_age
from torchcanary.packs.coverage import ClaimCoverage, claim_coverage, coverage_lines
from torchcanary.probe_result import ProbeResult, Verdict
from torchcanary.report_kit.svg import grouped_bars
from torchcanary.section_types import JUnitCase, RunView

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
    origin = reused_from(result)
    reused = (
        f'<div class="needs">reused from run {escape(str(origin.get("run_id")))}</div>'
        if origin
        else ""
    )
    return (
        f'<td>{_badge(outcome.verdict.value)}<div class="summary">'
        f"{escape(outcome.summary)}</div>{reused}</td>"
    )


def reuse_line(view: RunView) -> str | None:
    """How many verdicts came from earlier runs, and how old the oldest is; None if none."""
    results = claims_of(view).probe_results
    made = [origin["made_at"] for r in results if (origin := reused_from(r))]
    if not made:
        return None
    age = describe_age(max(view.run.created_at - min(made), 0.0))
    return (
        f"{len(made)} of {len(results)} verdicts reused from earlier runs of the same "
        f"environments on this machine (the oldest made {age} before this run); "
        "--fresh-claims runs them again"
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


def coverage(view: RunView) -> list[ClaimCoverage]:
    """Every claim of the run's packs with its status (see ``torchcanary.packs.coverage``)."""
    claims = claims_of(view)
    return claim_coverage(claims.packs, claims.probe_results)


def coverage_summary(view: RunView) -> list[str]:
    """The coverage line of each pack the run qualified against."""
    return coverage_lines(claims_of(view).packs, coverage(view))


def _expected(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _coverage_html(view: RunView) -> str:
    rows = "".join(
        f"<tr><td>{escape(row.pack)}</td><td><code>{escape(row.claim_id)}</code></td>"
        f'<td>{escape(row.topic)}<div class="quote">“{escape(row.quote)}”</div></td>'
        f"<td>{' '.join(f'<code>{escape(p)}</code>' for p in row.probes) or 'unprobed'}</td>"
        f'<td>{_badge(row.status.value)}<div class="summary">{escape(row.detail)}</div></td>'
        f"<td>{_expected(row.baseline_as_expected)}</td></tr>"
        for row in coverage(view)
    )
    lines = "".join(f"<p>{escape(line)}</p>" for line in coverage_summary(view))
    return (
        f'<section id="coverage"><h2>Coverage of the release notes</h2>{lines}'
        '<table class="coverage"><thead><tr><th>pack</th><th>claim</th><th>notes</th>'
        "<th>probes</th><th>candidate</th><th>baseline as expected</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _coverage_markdown(view: RunView) -> list[str]:
    lines = ["## Coverage of the release notes", ""]
    lines += [f"- {line}" for line in coverage_summary(view)]
    lines += ["", "| pack | claim | notes | probes | candidate | baseline as expected |"]
    lines.append("|---|---|---|---|---|---|")
    for row in coverage(view):
        quote = row.quote if len(row.quote) <= 90 else row.quote[:87] + "..."
        probes = ", ".join(f"`{p}`" for p in row.probes) or "unprobed"
        lines.append(
            f"| {row.pack} | {row.claim_id} | {quote.replace('|', '/')} | {probes} | "
            f"{row.status.value}: {row.detail.replace('|', '/')[:120]} | "
            f"{_expected(row.baseline_as_expected)} |"
        )
    return [*lines, ""]


def _reproducer(view: RunView, probe_id: str) -> str:
    """The link to a claim's verified reproducer (``torchcanary repro``), relative to the
    run's output folder; empty when it has none."""
    folder = view.reproducers.get(f"{SECTION}:{probe_id}")
    return f"{folder}/repro.py" if folder else ""


def _reproduce_html(view: RunView, probe_id: str) -> str:
    link = _reproducer(view, probe_id)
    return f' <a class="reproduce" href="{escape(link)}">Reproduce</a>' if link else ""


def html(view: RunView) -> str:
    rows = []
    for row in claims_of(view).rows():
        description = row.description
        comparison = row.comparison.value if row.comparison else "incomplete"
        quote = description.get("release_claim", "")
        rows.append(
            f'<tr id="claim-{escape(row.probe_id)}"><td><code>{escape(row.probe_id)}'
            f"</code>{_reproduce_html(view, row.probe_id)}"
            f'<div class="needs">pack {escape(str(description.get("pack", "-")))}'
            f"</div></td><td>{escape(description.get('claim', ''))}"
            + (f'<div class="quote">release: “{escape(quote)}”</div>' if quote else "")
            + f'<div class="needs">scope {escape(str(description.get("scope", "")))}; '
            f"needs {escape(str(description.get('needs', '')))}</div>{_evidence(row)}</td>"
            f"{_cell(row.baseline)}{_cell(row.candidate)}<td>{_badge(comparison)}</td></tr>"
        )
    reuse = reuse_line(view)
    return (
        '<section id="claims"><h2>Claims</h2>'
        + (f"<p>{escape(reuse)}</p>" if reuse else "")
        + '<table class="claims"><thead><tr>'
        "<th>probe</th><th>claim</th><th>baseline</th><th>candidate</th><th>upgrade</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></section>" + _coverage_html(view)
    )


def markdown(view: RunView) -> str:
    reuse = reuse_line(view)
    lines = [
        "## Claims",
        "",
        *([reuse, ""] if reuse else []),
        "| pack | probe | baseline | candidate | upgrade |",
        "|---|---|---|---|---|",
    ]
    for row in claims_of(view).rows():
        base = row.baseline.outcome.verdict.value if row.baseline else "not run"
        cand = row.candidate.outcome.verdict.value if row.candidate else "not run"
        comparison = row.comparison.value if row.comparison else "incomplete"
        pack = row.description.get("pack", "-")
        link = _reproducer(view, row.probe_id)
        probe = f"`{row.probe_id}`" + (f" ([Reproduce]({link}))" if link else "")
        lines.append(f"| {pack} | {probe} | {base} | {cand} | {comparison} |")
    return "\n".join([*lines, "", *_coverage_markdown(view)]) + "\n"


def junit_cases(view: RunView) -> list[JUnitCase]:
    cases = []
    for result in claims_of(view).probe_results:
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


def terminal(view: RunView) -> list[Any]:
    """The claims in the summary printed after a run: a table by pack (the probe id keeps
    its full width, the verdicts wrap, so it fits 80 columns), the tally, the coverage of
    the release notes. Nothing when no claim ran."""
    rows = claims_of(view).rows()
    if not rows:
        return []
    table = Table(title=f"claims, run {view.run.run_id}")
    table.add_column("probe", no_wrap=True)
    table.add_column("baseline -> candidate", overflow="fold")
    table.add_column("upgrade", overflow="fold")
    pack = None
    for row in rows:
        if row.description.get("pack", "-") != pack:
            pack = row.description.get("pack", "-")
            table.add_row(f"[bold]{pack}[/]", "", "")
        table.add_row(
            row.probe_id,
            (row.baseline.outcome.verdict.value if row.baseline else "-")
            + " -> "
            + (row.candidate.outcome.verdict.value if row.candidate else "-"),
            _comparison(row),
        )
    counts = Counter(_comparison(row) for row in rows)
    tally = "claims: " + ", ".join(f"{n} {label}" for label, n in counts.most_common())
    reuse = reuse_line(view)
    return [
        table,
        Text(tally),
        *([Text(f"claims: {reuse}")] if reuse else []),
        *(Text(f"coverage: {line}") for line in coverage_summary(view)),
    ]


def reused(view: RunView) -> dict[str, tuple[int, int]]:
    """Claim verdicts kept from earlier runs of the same environment, of all this run has."""
    results = claims_of(view).probe_results
    kept = sum(1 for result in results if reused_from(result))
    return {"claim verdicts": (kept, len(results))} if results else {}


def json_parts(view: RunView) -> dict[str, Any]:
    """``claims`` (a row per probe), ``coverage`` (a row per claim of the run's packs) and
    ``packs`` at the top of ``results.json`` (docs/json-schema.md)."""
    claims = claims_of(view)
    return {
        "claims": [
            {
                "probe_id": row.probe_id,
                "description": row.description,
                "comparison": row.comparison.value if row.comparison else None,
                "baseline": row.baseline.to_json() if row.baseline else None,
                "candidate": row.candidate.to_json() if row.candidate else None,
            }
            for row in claims.rows()
        ],
        # One row per claim of every pack the run qualified against (release-packs addition).
        "coverage": [row.to_json() for row in coverage(view)],
        "packs": claims.packs,
    }


def _comparison(row: ClaimRow) -> str:
    return row.comparison.value if row.comparison else "incomplete"
