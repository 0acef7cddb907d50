"""The claims across a fleet run's profiles: a claim x profile matrix, in every format.

A claim the candidate confirms on one profile and refutes on another leads the fleet's
reports: that is the fleet's own finding. ``fleet_part`` hands the reports (and the summary
printed after a run) these parts through the section contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from rich.table import Table

from torchcanary.claims.view import SECTION, ClaimRow, claims_of
from torchcanary.probe_result import Verdict
from torchcanary.report_kit.ledger import not_asked, not_checked
from torchcanary.section_types import FleetPart, JUnitCase, RunView

_SAYS_NO = (Verdict.REFUTED, Verdict.ABSENT)


@dataclass(frozen=True)
class MatrixRow:
    """One claim on every profile; a cell is None where that profile has no result."""

    probe_id: str
    description: dict[str, Any]
    cells: dict[str, ClaimRow | None]

    @property
    def split(self) -> bool:
        """The candidate confirms the claim on one profile and refutes it on another."""
        verdicts = {
            cell.candidate.outcome.verdict
            for cell in self.cells.values()
            if cell is not None and cell.candidate is not None
        }
        return Verdict.CONFIRMED in verdicts and any(v in verdicts for v in _SAYS_NO)

    def where(self, verdict: Verdict) -> list[str]:
        """The profiles whose candidate gave ``verdict``."""
        return [
            profile
            for profile, cell in self.cells.items()
            if cell is not None and cell.candidate and cell.candidate.outcome.verdict is verdict
        ]


def claim_matrix(view: RunView) -> list[MatrixRow]:
    """Every claim of every profile, a cell per profile; split claims first."""
    per_profile = {
        profile: {row.probe_id: row for row in claims_of(pview).rows()}
        for profile, pview in view.profiles.items()
    }
    skipped = not_asked(view)
    ids = sorted(
        {pid for rows in per_profile.values() for pid in rows}
        | {pid for reasons in skipped.values() for pid in reasons}
    )
    rows = []
    for pid in ids:
        cells = {profile: rows_by_id.get(pid) for profile, rows_by_id in per_profile.items()}
        described = next(
            (cell.description for cell in cells.values() if cell is not None), {"id": pid}
        )
        rows.append(MatrixRow(pid, described, cells))
    return sorted(rows, key=lambda row: (not row.split, row.probe_id))


def _why_empty(view: RunView) -> dict[str, dict[str, str]]:
    """Per profile, why a claim has no result there: not asked (its hardware cannot answer
    it), or not checked (its unit saw too few GPUs and ran nothing), by claim; a profile
    not checked at all answers for every claim (key ``""``)."""
    why = {
        profile: {pid: f"not asked: {reason}" for pid, reason in reasons.items()}
        for profile, reasons in not_asked(view).items()
    }
    for profile, reason in not_checked(view, SECTION).items():
        why.setdefault(profile, {})[""] = reason
    return why


def _empty(why: dict[str, dict[str, str]], profile: str, pid: str) -> str | None:
    reasons = why.get(profile, {})
    return reasons.get(pid) or reasons.get("")


def _cell_text(cell: ClaimRow | None, why_empty: str | None = None) -> tuple[str, str]:
    """``baseline -> candidate`` and the comparison, for one cell; for an empty cell, why."""
    if cell is None:
        return "-", why_empty or "not run"
    pair = (
        f"{cell.baseline.outcome.verdict.value if cell.baseline else '-'} -> "
        f"{cell.candidate.outcome.verdict.value if cell.candidate else '-'}"
    )
    return pair, cell.comparison.value if cell.comparison else "incomplete"


def _headline(row: MatrixRow) -> str:
    confirmed = ", ".join(row.where(Verdict.CONFIRMED))
    refuted = ", ".join(p for v in _SAYS_NO for p in row.where(v))
    return f"{row.probe_id}: confirmed on {confirmed}; refuted on {refuted}"


def fleet_part(view: RunView) -> FleetPart:
    """The matrix in every format, led by the claims that split (always, even empty: the
    fleet's JSON always holds ``split_claims`` and ``claims_matrix``)."""
    matrix = claim_matrix(view)
    split = [row for row in matrix if row.split]
    skipped = _why_empty(view)
    profiles = list(view.profiles)
    lead_html = ""
    lead_markdown: tuple[str, ...] = ()
    if split:
        items = "".join(f"<li>{escape(_headline(row))}</li>" for row in split)
        lead_html = (
            '<section id="split"><h2>Claims that depend on the hardware</h2>'
            f"<ul>{items}</ul></section>"
        )
        lead_markdown = (
            "**Claims that depend on the hardware:**",
            "",
            *(f"- {_headline(row)}" for row in split),
            "",
        )
    return FleetPart(
        lead_html=lead_html,
        lead_markdown=lead_markdown,
        matrix_html=_matrix_html(matrix, profiles, skipped) if matrix else "",
        matrix_markdown=_matrix_markdown(matrix, profiles, skipped) if matrix else (),
        json={
            "split_claims": [row.probe_id for row in split],
            "claims_matrix": [
                _matrix_json(row, not_asked(view), not_checked(view, SECTION)) for row in matrix
            ],
        },
        # Shown, not failed: CI fails exactly when the decision says no-go, and the
        # per-profile claims cases fail where the policy objects.
        junit_cases=tuple(
            JUnitCase("fleet", row.probe_id, "skipped", message=_headline(row)) for row in split
        ),
        terminal=_terminal(view, matrix, profiles),
    )


def _matrix_json(
    row: MatrixRow, skipped: dict[str, dict[str, str]], unchecked: dict[str, str]
) -> dict[str, Any]:
    return {
        "probe_id": row.probe_id,
        "split": row.split,
        "profiles": {
            profile: {
                "not_asked": skipped.get(profile, {}).get(row.probe_id),
                "not_checked": unchecked.get(profile),
            }
            if cell is None
            else {
                "baseline": cell.baseline.outcome.verdict.value if cell.baseline else None,
                "candidate": cell.candidate.outcome.verdict.value if cell.candidate else None,
                "comparison": cell.comparison.value if cell.comparison else None,
            }
            for profile, cell in row.cells.items()
        },
    }


def _matrix_markdown(
    matrix: list[MatrixRow], profiles: list[str], skipped: dict[str, dict[str, str]]
) -> tuple[str, ...]:
    lines = ["", "## Claims x profile", "", "| claim | " + " | ".join(profiles) + " |"]
    lines.append("|---" * (len(profiles) + 1) + "|")
    for row in matrix:
        cells = [
            " ".join(_cell_text(row.cells.get(p), _empty(skipped, p, row.probe_id)))
            for p in profiles
        ]
        mark = " **(split)**" if row.split else ""
        lines.append(f"| `{row.probe_id}`{mark} | " + " | ".join(cells) + " |")
    return tuple(lines)


def _matrix_html(
    matrix: list[MatrixRow], profiles: list[str], skipped: dict[str, dict[str, str]]
) -> str:
    head = "".join(f"<th>{escape(p)}</th>" for p in profiles)
    body = ""
    for row in matrix:
        cells = ""
        for profile in profiles:
            why = _empty(skipped, profile, row.probe_id)
            pair, comparison = _cell_text(row.cells.get(profile), why)
            css = comparison.replace(" ", "-")
            cells += (
                f"<td>{escape(pair)}<br><span class='badge {escape(css)}'>"
                f"{escape(comparison)}</span></td>"
            )
        mark = " <span class='badge refuted'>split</span>" if row.split else ""
        claim = escape(str(row.description.get("claim", "")))
        body += (
            f"<tr><td><code>{escape(row.probe_id)}</code>{mark}"
            f"<div class='summary'>{claim}</div></td>{cells}</tr>"
        )
    return (
        '<section id="claims-matrix"><h2>Claims x profile</h2><p>Each cell: baseline '
        "-> candidate verdict on that profile, and what the difference means.</p>"
        f"<table><tr><th>claim</th>{head}</tr>{body}</table></section>"
    )


def _terminal(view: RunView, matrix: list[MatrixRow], profiles: list[str]) -> tuple[Any, ...]:
    """The claim x profile table printed after a fleet run (nothing when no claim ran)."""
    table = Table(title=f"claims x profile, run {view.run.run_id}")
    table.add_column("probe", no_wrap=True)
    for profile in profiles:
        table.add_column(profile, overflow="fold")
    for row in matrix:
        cells = [
            (cell.comparison.value if cell.comparison else "incomplete") if cell else "-"
            for cell in (row.cells.get(p) for p in profiles)
        ]
        table.add_row(row.probe_id + (" [red](split)[/]" if row.split else ""), *cells)
    return (table,) if table.row_count else ()
