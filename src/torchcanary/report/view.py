"""Everything the outputs need about one run, read from the store once.

Every renderer (HTML, Markdown, JSON, JUnit) and the policy read a RunView, never the
store directly, so a report rendered again later shows exactly what the run stored. The
view names no section: it holds each section's ``section_results`` rows, and what a
section reads beside them (its ``load_view``, see ``contract.py``) under its name.
"""

from __future__ import annotations

import json

from torchcanary.accounting import PLANNED_ARTIFACT, declared_units
from torchcanary.report_kit.ledger import LEDGER_SECTION
from torchcanary.results import SectionRecord
from torchcanary.section_types import Finding, RunView
from torchcanary.sections import registered, section_names, stores_rows
from torchcanary.store.base import ResultStore

FLEET_ARTIFACT = "fleet.json"  # a fleet run's chosen nodes and their hardware profiles
# ``torchcanary repro``'s verified reproducers: finding -> folder (``RunView.reproducers``)
REPRODUCERS_ARTIFACT = "reproducers.json"


def run_so_far(store: ResultStore, run_id: str) -> tuple[RunView, list[Finding]]:
    """``run_id``'s view as stored now, and every registered section's findings in it, in
    run order: what a section that works on the others' results is handed."""
    view = load_run_view(store, run_id)
    return view, [
        finding for section in registered().values() for finding in section.findings(view)
    ]


def load_run_view(store: ResultStore, run_id: str) -> RunView:
    """Run ``run_id`` as the store holds it, each section's part read by the section."""
    run = store.run(run_id)
    artifacts = {name: content for name, _, content in store.artifacts(run_id)}
    names = [*section_names(), *run.plan.get("sections", ())]
    if store.profile:
        names.append(LEDGER_SECTION)
    known = registered()
    sections = {  # a section no longer installed (or the ledger) has plain rows
        name: store.section_results(run_id, name)
        for name in dict.fromkeys(names)
        if name not in known or stores_rows(known[name])
    }
    views = {
        name: section.load_view(store, run, sections.get(name, []))
        for name, section in known.items()
    }
    return RunView(
        run,
        store.environments(run_id),
        sections,
        {name: loaded for name, loaded in views.items() if loaded is not None},
        {
            profile: load_run_view(store.scoped(node, profile), run_id)
            for profile, node in (store.run_profiles(run_id) if not store.profile else {}).items()
        },
        json.loads(artifacts.get(FLEET_ARTIFACT, b"{}")),
        declared_units(artifacts[PLANNED_ARTIFACT]) if PLANNED_ARTIFACT in artifacts else None,
        json.loads(artifacts.get(REPRODUCERS_ARTIFACT, b"{}")),
    )


def section_records(view: RunView, section: str) -> list[SectionRecord]:
    """``section``'s stored rows as its typed records, read by the registered section.

    A section this installation does not know (a plugin since removed) keeps its plain
    rows, so an old run still renders.
    """
    known = registered().get(section)
    rows = view.sections.get(section, [])
    if known is None:
        return list(rows)
    return [known.record_from_json(row.to_json()) for row in rows]
