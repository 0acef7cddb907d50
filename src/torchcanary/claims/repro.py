"""The claims' part of ``torchcanary repro``: each claim that regressed or was refuted,
with its probe's module (whose source becomes the script) and both sides' verdicts."""

from __future__ import annotations

from torchcanary.claims.findings import deserves
from torchcanary.claims.view import claims_of
from torchcanary.section_types import Finding, RunView

SECTION = "claims"
KIND = "probe"  # the repro writer that reads these findings


def reproducible(view: RunView) -> list[Finding]:
    """Every probe whose claim regressed or was refuted in the candidate."""
    found = []
    for row in claims_of(view).rows():
        if not deserves(row) or row.baseline is None or row.candidate is None:
            continue
        sides = {"baseline": row.baseline.outcome, "candidate": row.candidate.outcome}
        found.append(
            Finding(
                section=SECTION,
                item=row.probe_id,
                kind=KIND,
                delta=f"{sides['baseline'].verdict.value} -> {sides['candidate'].verdict.value}",
                facts={
                    "probe": row.probe_id,
                    "module": str(row.description.get("module", "")),
                    "claim": str(row.description.get("claim", "")),
                    **{
                        role: {"verdict": o.verdict.value, "summary": o.summary}
                        for role, o in sides.items()
                    },
                },
            )
        )
    return found
