"""A fleet run's reports: the profile axis (claims as a claim x profile matrix, every other
section once per profile) in HTML, Markdown, JSON and JUnit.

Each profile's results are read as a view of their own (``RunView.profiles``), so every
section renders its part for a profile exactly as it does for a run on one machine; this
module only lays the profiles side by side. A claim the candidate confirms on one profile
and refutes on another leads the report: that is the fleet's own finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from torchcanary.report.json_out import render_json
from torchcanary.report.junit import JUnitCase
from torchcanary.report.page import _CSS
from torchcanary.report.view import LEDGER_SECTION, ClaimRow, RunView
from torchcanary.results import Verdict
from torchcanary.sections import get_section

_CLAIMS = "claims"
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
        profile: {row.probe_id: row for row in pview.claim_rows()}
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


def _cell_text(cell: ClaimRow | None, not_asked: str | None = None) -> tuple[str, str]:
    """``baseline -> candidate`` and the comparison, for one cell; for an empty cell, why."""
    if cell is None:
        return "-", f"not asked: {not_asked}" if not_asked else "not run"
    pair = (
        f"{cell.baseline.outcome.verdict.value if cell.baseline else '-'} -> "
        f"{cell.candidate.outcome.verdict.value if cell.candidate else '-'}"
    )
    return pair, cell.comparison.value if cell.comparison else "incomplete"


def _headline(row: MatrixRow) -> str:
    confirmed = ", ".join(row.where(Verdict.CONFIRMED))
    refuted = ", ".join(p for v in _SAYS_NO for p in row.where(v))
    return f"{row.probe_id}: confirmed on {confirmed}; refuted on {refuted}"


def not_asked(view: RunView) -> dict[str, dict[str, str]]:
    """Per profile, the claims its hardware could not answer (never sent), and why."""
    return {
        profile: {
            str(pid): str(why)
            for r in pview.sections.get(LEDGER_SECTION, [])
            for pid, why in (r.payload.get("not_asked") or {}).items()
        }
        for profile, pview in view.profiles.items()
    }


def _ledger(view: RunView) -> list[tuple[str, str, str, str]]:
    """Each unit of the run: profile, section, how it ended, why (when not ok)."""
    return [
        (profile, r.key, r.verdict, str(r.payload.get("error") or ""))
        for profile, pview in view.profiles.items()
        for r in pview.sections.get(LEDGER_SECTION, [])
    ]


def _node_of(view: RunView, profile: str) -> dict[str, Any]:
    for node in view.fleet.get("nodes", []):
        if node.get("key") == profile:
            return dict(node)
    return {}


def _hardware(view: RunView, profile: str) -> str:
    facts = _node_of(view, profile).get("profile", {})
    gpus = (
        f"{facts.get('gpu_count')}x {facts.get('gpu_model')}"
        if facts.get("gpu_count")
        else "no GPU"
    )
    cpu = f"{facts.get('cpu_model', '?')} ({facts.get('cpu_cores', '?')} cores)"
    return f"{gpus}; {cpu}; {facts.get('os', '?')}"


def section_matrix(view: RunView, section: str) -> list[tuple[str, dict[str, str]]]:
    """A section's results side by side: (key, {profile: verdict, with the ratio if any})."""
    rows: dict[str, dict[str, str]] = {}
    for profile, pview in view.profiles.items():
        for result in pview.sections.get(section, []):
            key = result.key if result.env_role == "both" else f"{result.key} ({result.env_role})"
            ratio = result.payload.get("ratio")
            shown = f"{result.verdict} {ratio:.3f}" if isinstance(ratio, float) else result.verdict
            rows.setdefault(key, {})[profile] = shown
    return sorted(rows.items())


# JSON ---------------------------------------------------------------------------------
def render_fleet_json(view: RunView, sections: tuple[str, ...] = ()) -> dict[str, Any]:
    """The run's JSON, with ``fleet``: the nodes, the matrix, the units, each profile's run."""
    data = render_json(view)
    skipped = not_asked(view)
    data["fleet"] = {
        "nodes": view.fleet.get("nodes", []),
        "split_claims": [row.probe_id for row in claim_matrix(view) if row.split],
        "claims_matrix": [
            {
                "probe_id": row.probe_id,
                "split": row.split,
                "profiles": {
                    profile: {"not_asked": skipped.get(profile, {}).get(row.probe_id)}
                    if cell is None
                    else {
                        "baseline": cell.baseline.outcome.verdict.value if cell.baseline else None,
                        "candidate": cell.candidate.outcome.verdict.value
                        if cell.candidate
                        else None,
                        "comparison": cell.comparison.value if cell.comparison else None,
                    }
                    for profile, cell in row.cells.items()
                },
            }
            for row in claim_matrix(view)
        ],
        "sections_matrix": {
            section: dict(section_matrix(view, section))
            for section in sections
            if section != _CLAIMS
        },
        "units": [
            {"profile": p, "section": s, "status": status, "error": error or None}
            for p, s, status, error in _ledger(view)
        ],
        "profiles": {profile: render_json(pview) for profile, pview in view.profiles.items()},
    }
    return data


# Markdown -----------------------------------------------------------------------------
def render_fleet_markdown(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    profiles = list(view.profiles)
    lines = [
        f"# torchcanary: **{run.decision or 'incomplete'}** across {len(profiles)} profiles",
        "",
        f"Baseline `{run.plan.get('baseline')}` vs candidate `{run.plan.get('candidate')}`"
        f" (run `{run.run_id}`), on: " + ", ".join(f"`{p}`" for p in profiles) + ".",
        "",
    ]
    matrix = claim_matrix(view)
    split = [row for row in matrix if row.split]
    if split:
        lines += ["**Claims that depend on the hardware:**", ""]
        lines += [f"- {_headline(row)}" for row in split] + [""]
    lines += [f"- {reason}" for reason in (run.decision_detail or {}).get("reasons", [])]
    broken = [(p, s, status, e) for p, s, status, e in _ledger(view) if status != "ok"]
    if broken:
        lines += [
            "",
            "**Units that did not finish** (`torchcanary run --resume` sends them again):",
            "",
        ]
        lines += [f"- {s} on `{p}`: {status}: {e}" for p, s, status, e in broken]
    if matrix and _CLAIMS in sections:
        lines += ["", "## Claims x profile", "", "| claim | " + " | ".join(profiles) + " |"]
        lines.append("|---" * (len(profiles) + 1) + "|")
        skipped = not_asked(view)
        for row in matrix:
            cells = [
                " ".join(_cell_text(row.cells.get(p), skipped[p].get(row.probe_id)))
                for p in profiles
            ]
            mark = " **(split)**" if row.split else ""
            lines.append(f"| `{row.probe_id}`{mark} | " + " | ".join(cells) + " |")
    for section in sections:
        side_by_side = section_matrix(view, section) if section != _CLAIMS else []
        if side_by_side:
            lines += ["", f"## {section} x profile", "", "| | " + " | ".join(profiles) + " |"]
            lines.append("|---" * (len(profiles) + 1) + "|")
            for key, by_profile in side_by_side:
                shown = [by_profile.get(profile, "-") for profile in profiles]
                lines.append(f"| `{key}` | " + " | ".join(shown) + " |")
    for profile, pview in view.profiles.items():
        lines += ["", f"# Profile `{profile}`", "", _hardware(view, profile), ""]
        lines += [get_section(s).markdown(pview) for s in sections if s != _CLAIMS]
    return "\n".join(lines) + "\n"


# JUnit --------------------------------------------------------------------------------
def fleet_junit_cases(view: RunView, sections: tuple[str, ...]) -> list[JUnitCase]:
    """Every section's cases once per profile (the suite names the profile), and each
    unit that did not finish as an error."""
    cases = []
    for profile, pview in view.profiles.items():
        for section in sections:
            for case in get_section(section).junit_cases(pview):
                cases.append(
                    JUnitCase(
                        f"{case.suite} [{profile}]",
                        case.name,
                        case.status,
                        case.time_s,
                        case.message,
                        case.text,
                    )
                )
    for profile, section, status, error in _ledger(view):
        if status != "ok":
            cases.append(
                JUnitCase(f"fleet [{profile}]", section, "error", message=f"{status}: {error}")
            )
    for row in claim_matrix(view):
        if row.split:
            # Shown, not failed: CI fails exactly when the decision says no-go, and the
            # per-profile claims cases above fail where the policy objects.
            cases.append(JUnitCase("fleet", row.probe_id, "skipped", message=_headline(row)))
    return cases


# HTML ---------------------------------------------------------------------------------
def render_fleet_html(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    detail = run.decision_detail or {}
    decision = run.decision or "incomplete"
    profiles = list(view.profiles)
    matrix = claim_matrix(view)
    split = [row for row in matrix if row.split]
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>torchcanary {escape(run.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>torchcanary run {escape(run.run_id)} across {len(profiles)} profiles</h1>",
        f"<p>baseline <code>{escape(run.plan.get('baseline', ''))}</code> against candidate "
        f"<code>{escape(run.plan.get('candidate', ''))}</code>; status {escape(run.status)}</p>",
        f'<div class="decision {escape(decision)}">decision: <strong>{escape(decision)}'
        "</strong></div>",
    ]
    if split:
        items = "".join(f"<li>{escape(_headline(row))}</li>" for row in split)
        parts.append(
            '<section id="split"><h2>Claims that depend on the hardware</h2>'
            f"<ul>{items}</ul></section>"
        )
    reasons = "".join(f"<li>{escape(r)}</li>" for r in detail.get("reasons", []))
    if reasons:
        parts.append(f"<h3>Why</h3><ul>{reasons}</ul>")
    parts.append(_nodes_html(view))
    if matrix and _CLAIMS in sections:
        head = "".join(f"<th>{escape(p)}</th>" for p in profiles)
        body = ""
        skipped = not_asked(view)
        for row in matrix:
            cells = ""
            for profile in profiles:
                why = skipped[profile].get(row.probe_id)
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
        parts.append(
            '<section id="claims-matrix"><h2>Claims x profile</h2><p>Each cell: baseline '
            "-> candidate verdict on that profile, and what the difference means.</p>"
            f"<table><tr><th>claim</th>{head}</tr>{body}</table></section>"
        )
    for section in sections:
        side_by_side = section_matrix(view, section) if section != _CLAIMS else []
        if side_by_side:
            head = "".join(f"<th>{escape(p)}</th>" for p in profiles)
            body = "".join(
                f"<tr><td><code>{escape(key)}</code></td>"
                + "".join(f"<td>{escape(cells.get(p, '-'))}</td>" for p in profiles)
                + "</tr>"
                for key, cells in side_by_side
            )
            parts.append(
                f'<section id="{escape(section)}-matrix"><h2>{escape(section)} x profile</h2>'
                f"<table><tr><th></th>{head}</tr>{body}</table></section>"
            )
    for profile, pview in view.profiles.items():
        fragments = "".join(get_section(s).html(pview) for s in sections if s != _CLAIMS)
        parts.append(
            f'<section class="profile"><h2>Profile {escape(profile)}</h2>'
            f"<p>{escape(_hardware(view, profile))}</p>{fragments}</section>"
        )
    parts.append("</body></html>")
    return "".join(parts)


def _nodes_html(view: RunView) -> str:
    rows = ""
    ledger = _ledger(view)
    for profile in view.profiles:
        node = _node_of(view, profile)
        units = ", ".join(
            f"{section}: {status}" + (f" ({error})" if error else "")
            for p, section, status, error in ledger
            if p == profile
        )
        rows += (
            f"<tr><td>{escape(profile)}</td><td>{escape(str(node.get('node_id', ''))[:12])}"
            f"</td><td>{escape(_hardware(view, profile))}</td><td>{escape(units)}</td></tr>"
        )
    return (
        '<section id="fleet"><h2>Fleet</h2><table><tr><th>profile</th><th>node</th>'
        f"<th>hardware</th><th>units</th></tr>{rows}</table></section>"
    )
