"""What of the drills deserves explaining (their part of the ``findings`` contract): each
drill that passed in the baseline and not in the candidate, with both sides' reasons and
tracebacks as the texts the explain section links to the changes they touch."""

from __future__ import annotations

from torchcanary.drill.result import DrillRun, DrillVerdict, from_rows
from torchcanary.section_types import Finding, RunView

SECTION = "drill"


def _text(run: DrillRun) -> str:
    return "\n".join(part for part in (run.reason, run.traceback) if part)


def findings(view: RunView) -> list[Finding]:
    """Every drill that regressed: passed in the baseline, not in the candidate."""
    runs = [r for r in from_rows(view.sections.get(SECTION, [])) if isinstance(r, DrillRun)]
    by_role = {(run.key, run.env_role): run for run in runs}
    found = []
    for (key, role), candidate in by_role.items():
        baseline = by_role.get((key, "baseline"))
        if role != "candidate" or baseline is None:
            continue
        if baseline.verdict is DrillVerdict.PASSED and candidate.verdict in (
            DrillVerdict.FAILED,
            DrillVerdict.ERROR,
            DrillVerdict.FLAKY,
        ):
            found.append(
                Finding(
                    section=SECTION,
                    item=key,
                    kind="outcome",
                    delta=f"{baseline.verdict} -> {candidate.verdict}",
                    facts={"baseline_text": _text(baseline), "candidate_text": _text(candidate)},
                )
            )
    return found
