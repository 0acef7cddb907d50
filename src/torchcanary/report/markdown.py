"""A Markdown summary sized for a pull-request comment or a CI step summary."""

from __future__ import annotations

from torchcanary.policy import headline
from torchcanary.report.torch_family import family_rows
from torchcanary.section_types import RunView
from torchcanary.sections import get_section, registered


def time_lines(view: RunView) -> list[str]:
    """Where the run's time went, and what it took from earlier runs instead of making it
    again: a second run of the same candidate reuses nearly everything, a new candidate
    only the baseline's side, and its time is read in that light."""
    seconds = (view.run.decision_detail or {}).get("seconds") or {}
    spent = " · ".join(f"{part} {taken:.0f} s" for part, taken in seconds.items())
    kept = reused_text(view)
    return [f"Time: {spent}.", *([kept] if kept else [])]


def reused_text(view: RunView) -> str | None:
    """``Reused from earlier runs: 14 of 28 claim verdicts, ...``; None where the run's
    sections keep nothing, or kept nothing this time."""
    counts = [
        (kind, kept, of)
        for name in view.run.plan.get("sections", ())
        if name in registered()
        for kind, (kept, of) in registered()[name].reused(view).items()
    ]
    if not any(kept for _, kept, _ in counts):
        return None
    return (
        "Reused from earlier runs: "
        + ", ".join(f"{kept} of {of} {kind}" for kind, kept, of in counts)
        + "."
    )


def render_markdown(view: RunView, sections: tuple[str, ...]) -> str:
    run = view.run
    detail = run.decision_detail or {}
    lines = [
        f"# torchcanary: **{headline(run.decision, detail)}**",
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
        lines += ["", *time_lines(view)]
    confounds = view.confounds()
    if confounds:
        lines += ["", "**Confounds** (the environments differ in more than the version):", ""]
        lines += [f"- {key}: `{b}` vs `{c}`" for key, (b, c) in confounds.items()]
    roles = [role for role in ("baseline", "candidate") if role in view.environments]
    family = family_rows(view, roles)
    if family:
        lines += ["", f"| torch family | {' | '.join(roles)} |", "|---" * (len(roles) + 1) + "|"]
        lines += [f"| {label} | {' | '.join(cells)} |" for label, cells in family]
    lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(get_section(s).markdown(view) for s in sections)
