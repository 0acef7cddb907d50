"""Why a test's outcome changed: the changes of the build its failure text touches, and
the first frame where the two runs' texts part ways.

A change (a finding of kind ``change``: the diff's removed or changed API, a flipped
default) is linked when the failing side's text names it (its full dotted name, or its
last part with the module's) or passes through a line of the user's code the diff found
using it (file:line). Links are evidence, not measured shares: each cause has no share,
and the explanation measures no unexplained part.
"""

from __future__ import annotations

import re
from typing import Any

from torchcanary.explain.cause import Cause
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.section_types import Finding

_FRAME = re.compile(r'File "([^"]+)", line (\d+)|^([^\s:]+\.py):(\d+)', re.M)


def frames(text: str) -> list[tuple[str, int]]:
    """The (file, line) frames of a Python or pytest failure text, in order."""
    return [
        (match.group(1) or match.group(3), int(match.group(2) or match.group(4)))
        for match in _FRAME.finditer(text)
    ]


def _touches(change: Finding, text: str, text_frames: list[tuple[str, int]]) -> str | None:
    """Every way ``text`` touches ``change``: it names it, it passes through a line of the
    user's code the diff found using it (None: neither)."""
    symbol = str(change.facts.get("symbol", ""))
    module, _, last = symbol.rpartition(".")
    ways = []
    if symbol and symbol in text:
        ways.append(f"the failure names {symbol}")
    elif last and module and re.search(rf"\b{re.escape(last)}\b", text) and module in text:
        ways.append(f"the failure names {last} of {module}")
    ways += sorted(
        {
            f"it passes through {hit['path']}:{line} ({hit.get('use', 'uses')} {symbol})"
            for hit in change.facts.get("hits") or ()
            for path, line in text_frames
            if int(hit.get("line", -1)) == line and path.endswith(str(hit.get("path", "?")))
        }
    )
    return "; ".join(ways) or None


def _first_differing(finding: Finding) -> Cause | None:
    base = frames(str(finding.facts.get("baseline_text", "")))
    cand = frames(str(finding.facts.get("candidate_text", "")))
    for index, frame in enumerate(cand):
        if index >= len(base) or base[index] != frame:
            return Cause(
                "first-differing-frame",
                f"{frame[0]}:{frame[1]}",
                evidence=f"frame {index + 1} of the candidate's failure, where the runs part "
                + (
                    f"(the baseline's: {base[index][0]}:{base[index][1]})"
                    if index < len(base)
                    else "(the baseline has no such frame)"
                ),
            )
    lines: dict[str, Any] = finding.facts.get("first_differing_lines") or {}
    if lines.get("candidate"):
        return Cause(
            "first-differing-frame",
            f"line {lines.get('line')}",
            evidence="where the texts part: " + " / ".join(map(str, lines["candidate"][:3])),
        )
    return None


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    text = "\n".join(
        str(finding.facts.get(side, "")) for side in ("candidate_text", "baseline_text")
    )
    text_frames = frames(text)
    causes = []
    for change in job.changes:
        how = _touches(change, text, text_frames)
        if how:
            causes.append(
                Cause(
                    str(change.facts.get("change", "change")),
                    str(change.facts.get("symbol", change.item)),
                    evidence=f"{change.delta}; {how}",
                    reproduce=f"torchcanary diff  # then see {change.item}",
                )
            )
    first = _first_differing(finding)
    not_checked = () if causes else ("tracebacks: no change the diff found appears in the failure",)
    return Contribution(tuple(causes) + ((first,) if first else ()), None, not_checked)


def applies(finding: Finding) -> bool:
    return finding.kind == "outcome"


EXPLAINER: Explainer = FunctionExplainer("tracebacks", applies, explain, measures=False)
