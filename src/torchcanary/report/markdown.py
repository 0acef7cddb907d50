"""A Markdown summary sized for a pull-request comment or a CI step summary."""

from __future__ import annotations

from torchcanary.report.view import RunView
from torchcanary.sections import get_section


def render_markdown(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    detail = run.decision_detail or {}
    lines = [
        f"# torchcanary: **{run.decision or 'incomplete'}**",
        "",
        f"Baseline `{run.plan.get('baseline')}` vs candidate `{run.plan.get('candidate')}`"
        f" (run `{run.run_id}`).",
        "",
    ]
    for reason in detail.get("reasons", []):
        lines.append(f"- {reason}")
    for warning in detail.get("warnings", []):
        lines.append(f"- warning: {warning}")
    if detail.get("seconds"):
        spent = " · ".join(f"{part} {seconds:.0f} s" for part, seconds in detail["seconds"].items())
        lines += ["", f"Time: {spent}."]
    confounds = view.confounds()
    if confounds:
        lines += ["", "**Confounds** (the environments differ in more than the version):", ""]
        lines += [f"- {key}: `{b}` vs `{c}`" for key, (b, c) in confounds.items()]
    lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(get_section(s).markdown(view) for s in sections)
