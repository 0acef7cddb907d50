"""A fleet run's reports: the profile axis (each section's results side by side, and once
per profile) in HTML, Markdown, JSON and JUnit.

Each profile's results are read as a view of their own (``RunView.profiles``), so every
section renders its part for a profile exactly as it does for a run on one machine; this
module only lays the profiles side by side. A section with a side-by-side of its own (its
``fleet_part``: the claims' claim x profile matrix, led by the claims the candidate
confirms on one profile and refutes on another) shows that instead.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.policy import headline
from torchcanary.report.json_out import render_json
from torchcanary.report.style import PAGE_CSS
from torchcanary.report_kit.ledger import LEDGER_SECTION, NOT_CHECKED, not_checked
from torchcanary.section_types import FleetPart, JUnitCase, RunView
from torchcanary.sections import get_section, registered


def fleet_parts(view: RunView) -> dict[str, FleetPart]:
    """Each section's own fleet part, where it has one, in run order."""
    parts = {name: section.fleet_part(view) for name, section in registered().items()}
    return {name: part for name, part in parts.items() if part is not None}


def _ledger(view: RunView) -> list[tuple[str, str, str, str, float | None]]:
    """Each unit of the run: profile, section, how it ended, why (when not ok), and for a
    lost one how many seconds its engine took to notice."""
    return [
        (profile, r.key, r.verdict, str(r.payload.get("error") or ""), _noticed(r.payload))
        for profile, pview in view.profiles.items()
        for r in pview.sections.get(LEDGER_SECTION, [])
    ]


def _noticed(payload: dict[str, Any]) -> float | None:
    noticed = payload.get("noticed_s")
    return float(noticed) if isinstance(noticed, int | float) else None


def _status_text(status: str, noticed: float | None) -> str:
    """``lost (noticed after 12.3 s)``, or the status alone."""
    return status if noticed is None else f"{status} (noticed after {noticed:.1f} s)"


def _devices(view: RunView, profile: str, section: str) -> dict[str, Any]:
    """What a unit asked its engine for and what it saw (``node_kit/devices.py``)."""
    for r in view.profiles[profile].sections.get(LEDGER_SECTION, []):
        if r.key == section:
            return dict(r.payload.get("devices") or {})
    return {}


def _given_text(view: RunView, profile: str) -> str:
    """What the profile's units were given and saw, in a line: ``claims: 2 GPUs asked,
    CUDA_VISIBLE_DEVICES=0,1, torch baseline 2 / candidate 2``; or that none was asked."""
    parts = []
    for r in view.profiles[profile].sections.get(LEDGER_SECTION, []):
        devices = r.payload.get("devices") or {}
        if not devices:
            continue
        asked = int((devices.get("asked") or {}).get("GPU", 0))
        variables = (devices.get("unit") or {}).get("variables") or {}
        shown = ", ".join(f"{name}={value}" for name, value in sorted(variables.items()))
        torch = " / ".join(
            f"{role} {seen.get('count', '?')}"
            for role, seen in sorted((devices.get("roles") or {}).items())
        )
        parts.append(
            f"{r.key}: {asked or 'no'} GPU{'' if asked == 1 else 's'} asked"
            + (f", {shown}" if shown else ", no visible-devices variable")
            + (f", torch sees {torch}" if torch else "")
        )
    return "; ".join(parts)


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


def site_flags(view: RunView) -> str:
    """The Slurm site flags every job of the run carried (``[fleet.slurm]``,
    ``--slurm-args``); "" when none were given."""
    site = view.fleet.get("slurm_site") or {}
    return str(site.get("flags") or "")


def section_matrix(view: RunView, section: str) -> list[tuple[str, dict[str, str]]]:
    """A section's results side by side: (key, {profile: verdict, with the ratio if any})."""
    rows: dict[str, dict[str, str]] = {}
    for profile, pview in view.profiles.items():
        for result in pview.sections.get(section, []):
            key = result.key if result.env_role == "both" else f"{result.key} ({result.env_role})"
            ratio = result.payload.get("ratio")
            shown = f"{result.verdict} {ratio:.3f}" if isinstance(ratio, float) else result.verdict
            rows.setdefault(key, {})[profile] = shown
    for profile, why in not_checked(view, section).items():
        for cells in rows.values():
            cells.setdefault(profile, why)
    return sorted(rows.items())


# JSON ---------------------------------------------------------------------------------
def render_fleet_json(view: RunView, sections: tuple[str, ...] = ()) -> dict[str, Any]:
    """The run's JSON, with ``fleet``: the nodes, the matrix, the units, each profile's run."""
    data = render_json(view)
    parts = fleet_parts(view)
    data["fleet"] = {"nodes": view.fleet.get("nodes", [])}
    # What a run records since Slurm's site flags and discovery notes: a run stored before
    # them renders as it did.
    data["fleet"] |= {
        key: view.fleet[key] for key in ("slurm_site", "discovery_notes") if key in view.fleet
    }
    for part in parts.values():
        data["fleet"] |= part.json
    data["fleet"] |= {
        "sections_matrix": {
            section: dict(section_matrix(view, section))
            for section in sections
            if section not in parts
        },
        "units": [
            {
                "profile": p,
                "section": s,
                "status": status,
                "error": error or None,
                "noticed_s": noticed,
                "devices": _devices(view, p, s),
            }
            for p, s, status, error, noticed in _ledger(view)
        ],
        "profiles": {profile: render_json(pview) for profile, pview in view.profiles.items()},
    }
    return data


# Markdown -----------------------------------------------------------------------------
def render_fleet_markdown(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    profiles = list(view.profiles)
    lines = [
        f"# torchcanary: **{headline(run.decision, run.decision_detail)}** "
        f"across {len(profiles)} profiles",
        "",
        f"Baseline `{run.plan.get('baseline')}` vs candidate `{run.plan.get('candidate')}`"
        f" (run `{run.run_id}`), on: " + ", ".join(f"`{p}`" for p in profiles) + ".",
        "",
    ]
    if site_flags(view):
        lines += [f"Every Slurm job carried the site flags `{site_flags(view)}`.", ""]
    lines += [f"- discovery: {note}" for note in view.fleet.get("discovery_notes", [])]
    parts = fleet_parts(view)
    for part in parts.values():
        lines += part.lead_markdown
    lines += [f"- {reason}" for reason in (run.decision_detail or {}).get("reasons", [])]
    lines += [f"- warning: {w}" for w in (run.decision_detail or {}).get("warnings", [])]
    broken = [
        (p, s, _status_text(status, n), e) for p, s, status, e, n in _ledger(view) if status != "ok"
    ]
    if broken:
        lines += [
            "",
            "**Units that did not finish** (`torchcanary run --resume` sends them again):",
            "",
        ]
        lines += [f"- {s} on `{p}`: {status}: {e}" for p, s, status, e in broken]
    for name, part in parts.items():
        if name in sections:
            lines += part.matrix_markdown
    for section in sections:
        side_by_side = section_matrix(view, section) if section not in parts else []
        if side_by_side:
            lines += ["", f"## {section} x profile", "", "| | " + " | ".join(profiles) + " |"]
            lines.append("|---" * (len(profiles) + 1) + "|")
            for key, by_profile in side_by_side:
                shown = [by_profile.get(profile, "-") for profile in profiles]
                lines.append(f"| `{key}` | " + " | ".join(shown) + " |")
    for profile, pview in view.profiles.items():
        lines += ["", f"# Profile `{profile}`", "", _hardware(view, profile), ""]
        if _given_text(view, profile):
            lines += [f"Units were given: {_given_text(view, profile)}", ""]
        lines += [get_section(s).markdown(pview) for s in sections if s not in parts]
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
    for profile, section, status, error, noticed in _ledger(view):
        if status == NOT_CHECKED:  # ran nothing, said so: never a pass, never an error
            cases.append(JUnitCase(f"fleet [{profile}]", section, "skipped", message=error))
        elif status != "ok":
            cases.append(
                JUnitCase(
                    f"fleet [{profile}]",
                    section,
                    "error",
                    message=f"{_status_text(status, noticed)}: {error}",
                )
            )
    for part in fleet_parts(view).values():
        cases += part.junit_cases
    return cases


# HTML ---------------------------------------------------------------------------------
def render_fleet_html(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    detail = run.decision_detail or {}
    decision = run.decision or "incomplete"
    profiles = list(view.profiles)
    own = fleet_parts(view)
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>torchcanary {escape(run.run_id)}</title><style>{PAGE_CSS}</style></head><body>",
        f"<h1>torchcanary run {escape(run.run_id)} across {len(profiles)} profiles</h1>",
        f"<p>baseline <code>{escape(run.plan.get('baseline', ''))}</code> against candidate "
        f"<code>{escape(run.plan.get('candidate', ''))}</code>; status {escape(run.status)}</p>",
        f'<div class="decision {escape(decision)}">decision: '
        f"<strong>{escape(headline(run.decision, detail))}"
        "</strong></div>",
    ]
    parts += [part.lead_html for part in own.values()]
    reasons = "".join(f"<li>{escape(r)}</li>" for r in detail.get("reasons", []))
    if reasons:
        parts.append(f"<h3>Why</h3><ul>{reasons}</ul>")
    warnings = "".join(f"<li>{escape(w)}</li>" for w in detail.get("warnings", []))
    if warnings:
        parts.append(f"<h3>Warnings the policy lets through</h3><ul>{warnings}</ul>")
    parts.append(_nodes_html(view))
    parts += [part.matrix_html for name, part in own.items() if name in sections]
    for section in sections:
        side_by_side = section_matrix(view, section) if section not in own else []
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
        fragments = "".join(get_section(s).html(pview) for s in sections if s not in own)
        parts.append(
            f'<section class="profile"><h2>Profile {escape(profile)}</h2>'
            f"<p>{escape(_hardware(view, profile))}</p>{fragments}</section>"
        )
    parts.append("</body></html>")
    return "".join(parts)


def _nodes_html(view: RunView) -> str:
    rows = ""
    ledger = _ledger(view)
    given = {profile: _given_text(view, profile) for profile in view.profiles}
    # A run stored before units recorded their devices has no such column to show.
    with_devices = any(given.values())
    for profile in view.profiles:
        node = _node_of(view, profile)
        units = ", ".join(
            f"{section}: {_status_text(status, noticed)}" + (f" ({error})" if error else "")
            for p, section, status, error, noticed in ledger
            if p == profile
        )
        rows += (
            f"<tr><td>{escape(profile)}</td><td>{escape(str(node.get('node_id', ''))[:12])}"
            f"</td><td>{escape(_hardware(view, profile))}</td><td>{escape(units)}</td>"
            + (f"<td>{escape(given[profile])}</td>" if with_devices else "")
            + "</tr>"
        )
    devices_head = "<th>devices given</th>" if with_devices else ""
    site = (
        f"<p>Every Slurm job carried the site flags <code>{escape(site_flags(view))}</code>.</p>"
        if site_flags(view)
        else ""
    )
    site += "".join(
        f"<p>discovery: {escape(note)}</p>" for note in view.fleet.get("discovery_notes", [])
    )
    return (
        f'<section id="fleet"><h2>Fleet</h2>{site}<table><tr><th>profile</th><th>node</th>'
        f"<th>hardware</th><th>units</th>{devices_head}</tr>{rows}</table></section>"
    )
