"""The diff section of the report: where your code meets a change first, then the unannounced
changes that can alter results (defaults and removals first), then counts of the rest.

HTML and Markdown show counts per kind and the leading changes; the JSON output carries
every change row. Every string that came from a build or a source file is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.diff.assess import (
    IN_USE_OTHER,
    IN_USE_OVERRIDDEN,
    IN_USE_RELIED_DEFAULT,
    IN_USE_REMOVED,
    IN_USE_SIGNATURE,
)
from torchcanary.diff.changes import ChangeKind
from torchcanary.diff.result import DiffChange, DiffSummary, from_rows
from torchcanary.diff.section import SECTION
from torchcanary.report_kit.text import literal_text
from torchcanary.results import ComparisonStatus
from torchcanary.section_types import JUnitCase

_TITLE = "What changed that the notes don't say"
_NOT_RUN = "The surface diff was not run."
_MARKDOWN_LIMIT = 30
_BLOCKING_BY_DEFAULT = (IN_USE_REMOVED, IN_USE_RELIED_DEFAULT)
_IN_USE_ORDER = (IN_USE_REMOVED, IN_USE_RELIED_DEFAULT, IN_USE_SIGNATURE, IN_USE_OVERRIDDEN)
_ONLY_IN_CANDIDATE = ("config-added", "api-added", "env-var-added")
_ONLY_IN_BASELINE = ("config-removed", "api-removed", "env-var-removed")


def _rows(view: Any) -> tuple[DiffSummary | None, list[DiffChange]]:
    records = from_rows(view.sections.get(SECTION, []))
    summary = next((r for r in records if isinstance(r, DiffSummary)), None)
    return summary, [r for r in records if isinstance(r, DiffChange)]


def _order(row: DiffChange) -> tuple[bool, bool, int, str]:
    return (
        row.announced,
        not row.alters_results,
        list(ChangeKind).index(row.verdict),
        row.symbol,
    )


def _in_use(changes: list[DiffChange]) -> list[DiffChange]:
    """Changes the code meets, worst use first."""
    ranks = {use: rank for rank, use in enumerate((*_IN_USE_ORDER, IN_USE_OTHER))}
    return sorted(
        (r for r in changes if r.in_use),
        key=lambda r: (ranks.get(r.in_use or "", len(ranks)), _order(r)),
    )


def _leading(changes: list[DiffChange]) -> list[DiffChange]:
    """Unannounced changes that can alter results, in report order."""
    return sorted((r for r in changes if r.unannounced_altering), key=_order)


def _announced(changes: list[DiffChange]) -> list[DiffChange]:
    return sorted((r for r in changes if r.announced), key=_order)


def _headline(summary: DiffSummary) -> str:
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return f"Not compared: {summary.reason or ''}"
    versions = summary.torch_versions or {}
    return (
        f"torch {versions.get('baseline')} -> {versions.get('candidate')}: "
        f"{summary.total or 0} change(s), {summary.announced or 0} announced, "
        f"{summary.unannounced_altering or 0} unannounced that can alter results; "
        f"collected and compared in {summary.section_s or 0} s"
        + (
            f" (the {' and '.join(sorted(summary.reused_made_at))} surface reused from an "
            "earlier run of the same environment and torchcanary)."
            if summary.reused_made_at
            else "."
        )
    )


def _scan_line(summary: DiffSummary) -> str:
    scan = summary.scan
    if not scan:
        return "Your code was not scanned (give --code PATH or [diff] code)."
    line = f"Scanned {scan['files_scanned']} file(s) under {scan['root']}: {scan['hits']} hit(s)."
    if scan.get("errors"):
        line += " Not scanned: " + "; ".join(f"{e['path']} ({e['error']})" for e in scan["errors"])
    return line


def _value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _sides(row: DiffChange) -> tuple[str, str]:
    """Both values as text; the side a name is missing from says so."""
    baseline = "absent" if row.verdict in _ONLY_IN_CANDIDATE else _value(row.baseline)
    candidate = "absent" if row.verdict in _ONLY_IN_BASELINE else _value(row.candidate)
    return baseline, candidate


def _hit_lines(row: DiffChange) -> list[str]:
    return [f"{hit['path']}:{hit['line']} ({hit['use']}): {hit['code']}" for hit in row.hits]


def _counts_rows(summary: DiffSummary) -> list[tuple[str, int, int]]:
    counts = summary.counts or {}
    silent = summary.unannounced_counts or {}
    return [
        (kind.value, counts.get(kind.value, 0), silent.get(kind.value, 0)) for kind in ChangeKind
    ]


def _change_cells(row: DiffChange) -> tuple[str, str, str, str]:
    return (
        row.verdict.value,
        row.name,
        row.detail,
        "announced (" + ", ".join(row.mentions) + ")" if row.announced else "unannounced",
    )


def html(view: Any) -> str:
    summary, changes = _rows(view)
    parts = [f'<section class="diff"><h2>{escape(_TITLE)}</h2>']
    if summary is None:
        return parts[0] + f"<p>{escape(_NOT_RUN)}</p></section>"
    parts.append(f"<p>{escape(_headline(summary))}</p>")
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return "".join(parts) + "</section>"
    parts.append(f"<p>{escape(_scan_line(summary))}</p>")
    used = _in_use(changes)
    if used:
        parts.append("<h3>Where your code meets a change</h3><ul>")
        for row in used:
            kind, symbol, detail, notes = _change_cells(row)
            hits = "".join(f"<li><code>{escape(h)}</code></li>" for h in _hit_lines(row))
            parts.append(
                f"<li><strong>{escape(str(row.in_use))}</strong>: "
                f"<code>{escape(symbol)}</code> ({escape(kind)}, {escape(notes)}): "
                f"{escape(detail)}<ul>{hits}</ul></li>"
            )
        parts.append("</ul>")
    parts.append(
        "<table><thead><tr><th>Kind</th><th>All</th><th>Unannounced</th></tr></thead><tbody>"
        + "".join(
            f"<tr><td>{escape(kind)}</td><td>{count}</td><td>{silent}</td></tr>"
            for kind, count, silent in _counts_rows(summary)
        )
        + "</tbody></table>"
    )
    for title, rows, opened in (
        ("Unannounced changes that can alter results", _leading(changes), " open"),
        ("Announced changes", _announced(changes), ""),
        ("Every change", sorted(changes, key=_order), ""),
    ):
        if not rows:
            continue
        parts.append(
            f"<details{opened}><summary>{escape(title)} ({len(rows)})</summary><table><thead>"
            "<tr><th>Kind</th><th>Name</th><th>Baseline</th><th>Candidate</th><th>Detail</th>"
            "<th>Notes</th></tr></thead><tbody>"
        )
        for row in rows:
            kind, symbol, detail, notes = _change_cells(row)
            baseline, candidate = _sides(row)
            parts.append(
                f"<tr><td>{escape(kind)}</td><td><code>{escape(symbol)}</code></td>"
                f"<td><code>{escape(baseline)}</code></td>"
                f"<td><code>{escape(candidate)}</code></td>"
                f"<td>{escape(detail)}</td><td>{escape(notes)}</td></tr>"
            )
        parts.append("</tbody></table></details>")
    parts.append(f"<p><small>{escape(summary.normalisation or '')}</small></p>")
    parts.append(
        "<p><small>Not checked: "
        + escape(" ".join(summary.not_checked or ()))
        + "</small></p></section>"
    )
    return "".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def _text_cell(text: str) -> str:
    """A cell outside backticks: angle brackets of reprs must not read as HTML tags."""
    return literal_text(_cell(text))


def reused(view: Any) -> dict[str, tuple[int, int]]:
    """The two environments' surface collections kept from earlier runs, of the two."""
    summary, _ = _rows(view)
    if summary is None or summary.verdict is ComparisonStatus.NOT_COMPARED:
        return {}
    return {"diff surfaces": (len(summary.reused_made_at or {}), 2)}


def markdown(view: Any) -> str:
    summary, changes = _rows(view)
    out = [f"## {_TITLE}", ""]
    if summary is None:
        return "\n".join([*out, _NOT_RUN, ""])
    out += [_headline(summary), ""]
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return "\n".join(out)
    out += [_scan_line(summary), ""]
    used = _in_use(changes)
    if used:
        out += ["### Where your code meets a change", ""]
        for row in used:
            kind, symbol, detail, notes = _change_cells(row)
            out.append(f"- **{row.in_use}**: `{symbol}` ({kind}, {notes}): " + _text_cell(detail))
            out += [f"  - `{_cell(line)}`" for line in _hit_lines(row)]
        out.append("")
    out += ["| Kind | All | Unannounced |", "|---|---|---|"]
    out += [f"| {kind} | {count} | {silent} |" for kind, count, silent in _counts_rows(summary)]
    out.append("")
    leading = _leading(changes)
    if leading:
        out += [
            "### Unannounced changes that can alter results",
            "",
        ]
        # A line each, not a table: full names must survive an 80-column terminal.
        for row in leading[:_MARKDOWN_LIMIT]:
            kind, symbol, detail, _ = _change_cells(row)
            out.append(f"- {kind} `{_cell(symbol)}`: {_text_cell(detail)}")
        if len(leading) > _MARKDOWN_LIMIT:
            out.append(f"\n{len(leading) - _MARKDOWN_LIMIT} more in the JSON output.")
        out.append("")
    announced = _announced(changes)
    if announced:
        out.append(
            "Announced: "
            + ", ".join(f"`{r.name}` ({r.verdict.value})" for r in announced[:20])
            + (f" and {len(announced) - 20} more" if len(announced) > 20 else "")
        )
        out.append("")
    return "\n".join(out)


def junit_cases(view: Any) -> list[JUnitCase]:
    """One case for the comparison, one per kind with its count, one per change your code
    meets (a failure when the default policy would block on it)."""
    summary, changes = _rows(view)
    if summary is None:
        return []
    suite = "torchcanary.diff"
    if summary.verdict is ComparisonStatus.NOT_COMPARED:
        return [
            JUnitCase(suite, "collect and compare surfaces", "error", message=_headline(summary))
        ]
    cases = [
        JUnitCase(
            suite,
            "collect and compare surfaces",
            "passed",
            float(summary.section_s or 0.0),
            message=_headline(summary),
        )
    ]
    cases += [
        JUnitCase(suite, f"{kind}: {count} ({silent} unannounced)", "passed")
        for kind, count, silent in _counts_rows(summary)
    ]
    for row in _in_use(changes):
        blocking = row.in_use in _BLOCKING_BY_DEFAULT
        kind, symbol, detail, notes = _change_cells(row)
        cases.append(
            JUnitCase(
                suite,
                f"{row.in_use}: {symbol}",
                "failure" if blocking else "passed",
                message=f"{kind}, {notes}: {detail}",
                text="\n".join(_hit_lines(row)),
            )
        )
    return cases
