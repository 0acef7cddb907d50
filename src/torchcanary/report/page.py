"""The self-contained HTML report: one file, inline CSS and SVG, no script, no network."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape

from torchcanary.policy import headline
from torchcanary.report.style import PAGE_CSS
from torchcanary.report.torch_family import family_rows
from torchcanary.section_types import RunView
from torchcanary.sections import get_section


def _manifests(view: RunView) -> str:
    confounds = view.confounds()
    if confounds:
        rows = "".join(
            f"<tr><td>{escape(k)}</td><td>{escape(str(b))}</td><td>{escape(str(c))}</td></tr>"
            for k, (b, c) in confounds.items()
        )
        banner = (
            '<div class="confound"><strong>Confounds:</strong> the environments differ '
            "in more than the torch version, so every figure below compares these too."
            f"<table><tr><th>fact</th><th>baseline</th><th>candidate</th></tr>{rows}"
            "</table></div>"
        )
    else:
        banner = "<p>The environments differ in the torch version only.</p>"
    keys = sorted({k for env in view.environments.values() for k in env.manifest.facts})
    roles = [r for r in ("baseline", "candidate") if r in view.environments]
    body = ""
    for key in keys:
        cells = "".join(
            f"<td><pre>{escape(_fact(view.environments[r].manifest.facts.get(key)))}</pre></td>"
            if key in ("torch_config", "torch_parallel_info")
            else f"<td>{escape(_fact(view.environments[r].manifest.facts.get(key)))}</td>"
            for r in roles
        )
        body += f"<tr><td>{escape(key)}</td>{cells}</tr>"
    head = "".join(f"<th>{escape(r)}: {escape(view.environments[r].spec)}</th>" for r in roles)
    family = _family_table(view, roles)
    return (
        f'<section id="environments"><h2>Environments</h2>{banner}{family}<details><summary>'
        f"full manifests side by side</summary><table><tr><th>fact</th>{head}</tr>{body}"
        "</table></details></section>"
    )


def _family_table(view: RunView, roles: Sequence[str]) -> str:
    rows = family_rows(view, roles)
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{escape(label)}</td>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
        for label, cells in rows
    )
    head = "".join(f"<th>{escape(role)}</th>" for role in roles)
    return f'<table class="torch-family"><tr><th>torch family</th>{head}</tr>{body}</table>'


def _fact(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def render_html(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    detail = run.decision_detail or {}
    decision = run.decision or "incomplete"
    reasons = "".join(f"<li>{escape(r)}</li>" for r in detail.get("reasons", []))
    warnings = "".join(f"<li>{escape(w)}</li>" for w in detail.get("warnings", []))
    fragments = "".join(get_section(s).html(view) for s in sections)
    failures = "".join(
        f"<li>section {escape(s)}: {escape(msg)}</li>"
        for s, msg in detail.get("section_failures", {}).items()
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>torchcanary {escape(run.run_id)}</title><style>{PAGE_CSS}</style></head><body>"
        f"<h1>torchcanary run {escape(run.run_id)}</h1>"
        f"<p>baseline <code>{escape(run.plan.get('baseline', ''))}</code> against candidate "
        f"<code>{escape(run.plan.get('candidate', ''))}</code>; status {escape(run.status)}</p>"
        f'<div class="decision {escape(decision)}">decision: '
        f"<strong>{escape(headline(run.decision, detail))}"
        f"</strong></div>"
        + (f"<h3>Why</h3><ul>{reasons}</ul>" if reasons else "")
        + (f"<h3>Warnings the policy lets through</h3><ul>{warnings}</ul>" if warnings else "")
        + (f"<h3>Sections that could not finish</h3><ul>{failures}</ul>" if failures else "")
        + _manifests(view)
        + fragments
        + "</body></html>"
    )
