"""A Markdown summary sized for a pull-request comment or a CI step summary."""

from __future__ import annotations

import re

from torchcanary.report.view import RunView
from torchcanary.sections import get_section

_TAG_LIKE = re.compile(r"<[^<>\n]*>")


def literal_text(text: str) -> str:
    """``text`` for Markdown prose, with every ``<...>`` (a repr such as ``<alias of x>``)
    as a code span: bare, a renderer takes it for an HTML tag and drops it, and an entity
    (``&lt;``) shows as such in the terminal and in the file itself."""
    return _TAG_LIKE.sub(lambda found: _code_span(found.group(0)), text)


def _code_span(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


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
    if detail.get("seconds"):
        spent = " · ".join(f"{part} {seconds:.0f} s" for part, seconds in detail["seconds"].items())
        lines += ["", f"Time: {spent}."]
    confounds = view.confounds()
    if confounds:
        lines += ["", "**Confounds** (the environments differ in more than the version):", ""]
        lines += [f"- {key}: `{b}` vs `{c}`" for key, (b, c) in confounds.items()]
    lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(get_section(s).markdown(view) for s in sections)
