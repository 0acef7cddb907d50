"""Everything the outputs need about one run, read from the store once.

Every renderer (HTML, Markdown, JSON, JUnit) and the policy read a RunView, never the
store directly, so a report rendered again later shows exactly what the run stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import ClaimComparison, ProbeResult, SectionRecord, compare_claim
from torchcanary.sections import registered, section_names
from torchcanary.store.base import ResultStore
from torchcanary.store.history import HistoryEntry, RecordReader, bench_history
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult

CATALOG_ARTIFACT = "catalog.json"
PROBE_RESULTS_SECTION = "claims"  # its results are probe results, kept in a table of their own
BENCH_SECTION = "bench"  # its benchmarks' recent history is shown beside each
PACKS_ARTIFACT = "packs.json"  # the claims packs a run qualified against (coverage of the notes)
FLEET_ARTIFACT = "fleet.json"  # a fleet run's chosen nodes and their hardware profiles
LEDGER_SECTION = "fleet"  # a fleet run's units, one row per profile and section: how each ended


def _reader(section: str) -> RecordReader | None:
    known = registered().get(section)
    return known.record_from_json if known is not None else None


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
class RunView:
    run: RunRow
    environments: dict[str, EnvironmentRow]
    catalog: dict[str, dict[str, Any]]
    probe_results: list[ProbeResult]
    sections: dict[str, list[SectionResult]]
    # each benchmark's results in this run and the store's runs before it (most recent 10)
    bench_history: dict[str, list[HistoryEntry]] = field(default_factory=dict)
    packs: list[dict[str, Any]] = field(default_factory=list)
    # A fleet run: each hardware profile's own view (its results only), and the fleet's
    # record of the nodes chosen. Empty for a run on one machine.
    profiles: dict[str, RunView] = field(default_factory=dict)
    fleet: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, store: ResultStore, run_id: str) -> RunView:
        run = store.run(run_id)
        artifacts = {name: content for name, _, content in store.artifacts(run_id)}
        catalog = json.loads(artifacts.get(CATALOG_ARTIFACT, b"{}"))
        names = [*section_names(), *run.plan.get("sections", ())]
        if store.profile:
            names.append(LEDGER_SECTION)
        sections = {
            name: store.section_results(run_id, name)
            for name in dict.fromkeys(names)
            if name != PROBE_RESULTS_SECTION
        }
        return cls(
            run,
            store.environments(run_id),
            catalog,
            store.probe_results(run_id),
            sections,
            bench_history(
                store,
                run,
                [r.key for r in sections.get(BENCH_SECTION, [])],
                _reader(BENCH_SECTION),
            ),
            json.loads(artifacts.get(PACKS_ARTIFACT, b"[]")),
            {
                profile: cls.load(store.scoped(node, profile), run_id)
                for profile, node in (
                    store.run_profiles(run_id) if not store.profile else {}
                ).items()
            },
            json.loads(artifacts.get(FLEET_ARTIFACT, b"{}")),
        )

    def records(self, section: str) -> list[SectionRecord]:
        """``section``'s stored rows as its typed records, read by the registered section.

        A section this installation does not know (a plugin since removed) keeps its plain
        rows, so an old run still renders.
        """
        known = registered().get(section)
        rows = self.sections.get(section, [])
        if known is None:
            return list(rows)
        return [known.record_from_json(row.to_json()) for row in rows]

    def claim_rows(self) -> list[ClaimRow]:
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

    def confounds(self) -> dict[str, tuple[Any, Any]]:
        """Build facts other than the version on which baseline and candidate differ."""
        if "baseline" not in self.environments or "candidate" not in self.environments:
            return {}
        return self.environments["baseline"].manifest.confounds_against(
            self.environments["candidate"].manifest
        )
