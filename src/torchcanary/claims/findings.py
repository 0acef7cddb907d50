"""What of the claims deserves explaining (their part of the ``findings`` contract): each
claim that regressed (held in the baseline, not in the candidate) or was refuted where the
release says it holds, with both sides' summaries and evidence as the texts the explain
section links to the changes they touch."""

from __future__ import annotations

import json

from torchcanary.claims.view import ClaimComparison, ClaimRow, claims_of
from torchcanary.probe_result import ProbeResult, Verdict
from torchcanary.section_types import Finding, RunView

SECTION = "claims"


def _text(result: ProbeResult | None) -> str:
    if result is None:
        return ""
    evidence = json.dumps(result.outcome.evidence, default=str)[:4000]
    return f"{result.outcome.summary}\n{evidence}"


def deserves(row: ClaimRow) -> bool:
    """Regressed (held in the baseline, not in the candidate), or refuted in the candidate."""
    refuted = row.candidate is not None and row.candidate.outcome.verdict is Verdict.REFUTED
    return row.comparison is ClaimComparison.REGRESSED or refuted


def findings(view: RunView) -> list[Finding]:
    """Every probe whose claim regressed or was refuted in the candidate."""
    return [
        Finding(
            section=SECTION,
            item=row.probe_id,
            kind="outcome",
            delta=" -> ".join(
                str(side.outcome.verdict.value) if side else "-"
                for side in (row.baseline, row.candidate)
            ),
            facts={"baseline_text": _text(row.baseline), "candidate_text": _text(row.candidate)},
        )
        for row in claims_of(view).rows()
        if deserves(row)
    ]
