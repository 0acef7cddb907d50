"""Everything the outputs need about one run, read from the store once.

Every renderer (HTML, Markdown, JSON, JUnit) and the policy read a RunView, never the
store directly, so a report rendered again later shows exactly what the run stored. The
view names no section: it holds each section's ``section_results`` rows, and what a
section reads beside them (its ``load_view``, see ``sections.py``) under its name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import SectionRecord
from torchcanary.sections import registered, section_names, section_view, stores_rows
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult

FLEET_ARTIFACT = "fleet.json"  # a fleet run's chosen nodes and their hardware profiles
LEDGER_SECTION = "fleet"  # a fleet run's units, one row per profile and section: how each ended


@dataclass(frozen=True)
class RunView:
    run: RunRow
    environments: dict[str, EnvironmentRow]
    sections: dict[str, list[SectionResult]]
    # What each section loaded beside its rows (its ``load_view``), by section name.
    section_views: dict[str, Any] = field(default_factory=dict)
    # A fleet run: each hardware profile's own view (its results only), and the fleet's
    # record of the nodes chosen. Empty for a run on one machine.
    profiles: dict[str, RunView] = field(default_factory=dict)
    fleet: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, store: ResultStore, run_id: str) -> RunView:
        run = store.run(run_id)
        artifacts = {name: content for name, _, content in store.artifacts(run_id)}
        names = [*section_names(), *run.plan.get("sections", ())]
        if store.profile:
            names.append(LEDGER_SECTION)
        sections = {
            name: store.section_results(run_id, name)
            for name in dict.fromkeys(names)
            if stores_rows(registered().get(name))
        }
        views = {
            name: section_view(section, store, run, sections.get(name, []))
            for name, section in registered().items()
        }
        return cls(
            run,
            store.environments(run_id),
            sections,
            {name: loaded for name, loaded in views.items() if loaded is not None},
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

    def confounds(self) -> dict[str, tuple[Any, Any]]:
        """Build facts other than the version on which baseline and candidate differ."""
        if "baseline" not in self.environments or "candidate" not in self.environments:
            return {}
        return self.environments["baseline"].manifest.confounds_against(
            self.environments["candidate"].manifest
        )
