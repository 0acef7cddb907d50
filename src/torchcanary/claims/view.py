"""What the claims' report parts, policy and comparisons read of a stored run.

The claims keep their results as probe results in a store table of their own
(``probe_results``), with the run's probe catalog and packs as artifacts. ``load`` reads
them once when a ``RunView`` is loaded (the section contract's ``load_view``); everything
else reads them through :func:`claims_of`, so the run view names no section.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchcanary.claims.records import probe_results
from torchcanary.probe_result import ProbeResult, Verdict

if TYPE_CHECKING:
    from torchcanary.section_types import RunView
    from torchcanary.store.base import ResultStore
    from torchcanary.store.rows import RunRow, SectionResult

SECTION = "claims"
CATALOG_ARTIFACT = "catalog.json"  # the probes the run selected, as they describe themselves
PACKS_ARTIFACT = "packs.json"  # the claims packs a run qualified against (coverage of the notes)


class ClaimComparison(str, enum.Enum):
    """What a claim's two per-environment verdicts mean for the upgrade."""

    NEW_IN_CANDIDATE = "new in candidate"
    ALREADY_IN_BASELINE = "already in baseline"
    NOT_REPRODUCED = "not reproduced"
    REGRESSED = "regressed"
    UNVERIFIED = "unverified here"


def compare_claim(baseline: Verdict, candidate: Verdict) -> ClaimComparison:
    """Combine the baseline's and candidate's verdicts on one claim."""
    if candidate is Verdict.NOT_CHECKABLE:
        return ClaimComparison.UNVERIFIED
    if candidate is Verdict.CONFIRMED:
        if baseline is Verdict.CONFIRMED:
            return ClaimComparison.ALREADY_IN_BASELINE
        return ClaimComparison.NEW_IN_CANDIDATE
    if baseline is Verdict.CONFIRMED:
        # Worked before, does not now: whether refuted, absent or broken, it is a regression.
        return ClaimComparison.REGRESSED
    if candidate.is_failure_of_the_harness:
        return ClaimComparison.UNVERIFIED
    return ClaimComparison.NOT_REPRODUCED


@dataclass(frozen=True)
class ClaimRow:
    """One probe across both environments, with what the difference means."""

    probe_id: str
    description: dict[str, Any]
    baseline: ProbeResult | None
    candidate: ProbeResult | None

    @property
    def comparison(self) -> ClaimComparison | None:
        if self.baseline is None or self.candidate is None:
            return None
        return compare_claim(self.baseline.outcome.verdict, self.candidate.outcome.verdict)


@dataclass(frozen=True)
class ClaimsView:
    """A run's probe results, the catalog of the probes it selected, and its packs."""

    probe_results: list[ProbeResult] = field(default_factory=list)
    catalog: dict[str, dict[str, Any]] = field(default_factory=dict)
    packs: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> list[ClaimRow]:
        """Every probe that ran or was selected, by id, with both environments' results."""
        by_key = {(r.probe_id, r.env_role): r for r in self.probe_results}
        ids = sorted({r.probe_id for r in self.probe_results} | set(self.catalog))
        return [
            ClaimRow(
                pid,
                self.catalog.get(pid, {"id": pid}),
                by_key.get((pid, "baseline")),
                by_key.get((pid, "candidate")),
            )
            for pid in ids
        ]


def load(store: ResultStore, run: RunRow, rows: list[SectionResult]) -> ClaimsView:
    """The claims of ``run`` as ``store`` (scoped to a fleet profile, or not) holds them.

    ``rows`` is empty: the claims store no ``section_results`` rows.
    """
    artifacts = {name: content for name, _, content in store.artifacts(run.run_id)}
    return ClaimsView(
        probe_results(store, run.run_id),
        json.loads(artifacts.get(CATALOG_ARTIFACT, b"{}")),
        json.loads(artifacts.get(PACKS_ARTIFACT, b"[]")),
    )


def claims_of(view: RunView) -> ClaimsView:
    """The claims part of ``view`` (empty where the run view was built without it)."""
    found = view.section_views.get(SECTION)
    return found if isinstance(found, ClaimsView) else ClaimsView()
