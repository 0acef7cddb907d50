"""The honesty harness (issue 38): no section answers go for work it did not do.

Every registered section (each built-in, and the third-party fixture section) is planned
with settings that give it units; then each failure a unit can meet is injected into what
the store holds after the run, as the core finds it:

- a worker that crashed, or a hang killed past its timeout: the unit's row says so
  (``crashed``, ``timeout``), or there is none (it died before storing);
- empty output: the unit's row carries no verdict word;
- an exception in the section's own code: the section could not finish, the unit unstored;
- the environment missing: no unit of that environment (nor their comparison) stored.

Every other planned unit is stored with one of the section's checked verdicts. The decision
must never be go, and its reasons (what every report prints first) must name the unit. A
new section is driven the same way with no change here (its own config table's defaults),
and the harness fails for one that would answer go. Nothing runs torch: the store is filled
directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from torchcanary.claims.records import save_probe_result
from torchcanary.contract import Section
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide, resolve_policy
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.report.markdown import render_markdown
from torchcanary.report.view import load_run_view
from torchcanary.section_types import PlannedUnit
from torchcanary.sections import registered, stores_rows
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

THIRD_PARTY = Path(__file__).parent / "fixtures" / "third_party_section"
PROBE = "sanity.version-pin"  # the claims' one planned claim here
# What a section needs beyond its table's defaults to plan any unit (a command to run).
TABLES: dict[str, dict[str, Any]] = {
    "stack": {"command": "pytest -q"},
    "calls": {"command": "pytest -q"},
    "bench": {"families": [], "benchmarks": [{"kind": "synthetic", "op": "add", "id": "add"}]},
    "claims": {"probes": [PROBE]},
}
# A failure as the core sees it: the injected unit's verdict word (None: no row at all),
# and whether the section could not finish.
FAILURES: dict[str, tuple[str | None, bool]] = {
    "worker crash, verdict stored": ("crashed", False),
    "worker crash before storing": (None, False),
    "hang past its timeout": ("timeout", False),
    "empty output": ("", False),
    "exception in the section's own code": (None, True),
}
# The claims keep their own table: a broken probe is stored as the worker's failure.
CLAIM_VERDICTS = {"crashed": Verdict.CRASHED, "timeout": Verdict.TIMEOUT, "": Verdict.ERROR}
REPORTS: dict[str, str] = {}  # each section's latest run's summary.md, as a reader gets it


@pytest.fixture
def every_section(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Section]]:
    """Every registered section, the third-party fixture section among them."""
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    registered.cache_clear()
    sections = registered()
    assert "footprint" in sections
    yield sections
    registered.cache_clear()


def _plan(section: Section) -> RunPlan:
    settings = {section.name: section.parse_settings(TABLES.get(section.name, {}))}
    return RunPlan("torch==2.13.0", "torch==2.14.1", (section.name,), settings=settings)


def _as_stored(section: Section, verdict: str | None, unit: PlannedUnit) -> str | None:
    """The failure's verdict word as the section can store it for ``unit``: a typed section
    refuses a word outside its enum when it is written, so there the unit has no row."""
    if verdict is None or not stores_rows(section):
        return verdict
    row = {"key": unit.item, "env_role": unit.env_role, "verdict": verdict, "payload": {}}
    try:
        section.record_from_json(row)
    except ValueError:
        return None
    return verdict


def _victim(planned: list[PlannedUnit]) -> PlannedUnit:
    """The unit the failure is injected into: one the candidate ran, where there is one."""
    return next((u for u in planned if u.env_role == "candidate"), planned[0])


def _store_units(
    store: SqliteStore,
    run_id: str,
    section: Section,
    verdicts: dict[PlannedUnit, str | None],
) -> None:
    """Each unit with its verdict (None: not stored), as rows of the section's shape: a
    row per item and environment, holding its trials where the units are trials."""
    if not stores_rows(section):
        for unit, verdict in verdicts.items():
            if verdict is not None:
                word = CLAIM_VERDICTS[verdict] if verdict in CLAIM_VERDICTS else Verdict(verdict)
                outcome = Outcome(word, "injected")
                result = ProbeResult(run_id, unit.env_role, unit.item, outcome, 1.0, time.time())
                save_probe_result(store, result)
        return
    rows: dict[tuple[str, str], list[tuple[int, str | None]]] = {}
    for unit, verdict in verdicts.items():
        rows.setdefault((unit.item, unit.env_role), []).append((unit.trial, verdict))
    for (item, role), trials in rows.items():
        if any(verdict is None for _, verdict in trials):
            continue  # the row was never written
        words = [str(verdict) for _, verdict in trials]
        payload: dict[str, Any] = {"reason": "injected"}
        if any(trial for trial, _ in trials):
            payload["trials"] = [{"verdict": word, "reason": "injected"} for word in words]
        word = next((w for w in words if w not in section.checked_verdicts), words[0])
        store.save_section_result(run_id, SectionResult(section.name, item, role, word, payload))


def _decide_after(
    store: SqliteStore,
    section: Section,
    inject: Callable[[list[PlannedUnit]], dict[PlannedUnit, str | None]],
    failed: bool = False,
    policy: dict[str, Any] | None = None,
    report: bool = False,
) -> Decision:
    plan = _plan(section)
    planned = section.planned_units(plan)
    assert planned, f"section {section.name} plans no unit; the harness cannot hold it to any"
    run_id = store.create_run(plan.to_json())
    _store_units(store, run_id, section, inject(planned))
    failures = {section.name: "RuntimeError: injected"} if failed else {}
    view = load_run_view(store, run_id)
    decision = decide(view, resolve_policy(policy or {}, plan.sections), plan.sections, failures)
    store.finish_run(run_id, decision.label, decision.to_json())
    if report:  # the stored run as a reader gets it (rows of real payloads render whole)
        REPORTS[section.name] = render_markdown(load_run_view(store, run_id), plan.sections)
    return decision


def _checked(section: Section, unit: PlannedUnit) -> str:
    """A checked verdict the section can store for ``unit`` (a suite's run and the runs'
    comparison take different words)."""
    for word in sorted(section.checked_verdicts):
        if _as_stored(section, word, unit) is not None:
            return word
    raise AssertionError(f"section {section.name} can store no checked verdict for {unit}")


def _all_checked(section: Section) -> Callable[[list[PlannedUnit]], dict[PlannedUnit, str | None]]:
    return lambda planned: {unit: _checked(section, unit) for unit in planned}


def test_a_section_whose_units_all_ended_checked_leaves_nothing_unchecked(
    every_section: dict[str, Section], store: SqliteStore
) -> None:
    """The harness's control: without an injected failure the core finds no undone unit."""
    for section in every_section.values():
        decision = _decide_after(store, section, _all_checked(section))
        assert decision.not_checked == 0, (section.name, decision.reasons)


@pytest.mark.parametrize("failure", FAILURES)
def test_no_section_answers_go_for_a_unit_that_failed(
    every_section: dict[str, Section], store: SqliteStore, failure: str
) -> None:
    verdict, failed = FAILURES[failure]
    for section in every_section.values():
        victim = _victim(section.planned_units(_plan(section)))
        stored = _as_stored(section, verdict, victim)

        def inject(
            planned: list[PlannedUnit], section: Section = section, stored: str | None = stored
        ) -> dict[PlannedUnit, str | None]:
            victim = _victim(planned)
            return {u: stored if u == victim else _checked(section, u) for u in planned}

        decision = _decide_after(store, section, inject, failed, report=True)
        assert not decision.go, (section.name, failure)
        assert any(victim.describe() in reason for reason in decision.reasons), (
            section.name,
            failure,
            decision.reasons,
        )
        report = REPORTS[section.name]
        assert report.startswith("# torchcanary: **no-go**") and victim.describe() in report
        # A policy that lets unchecked units through still never says a bare go.
        relaxed = _decide_after(
            store, section, inject, failed, {"block_on_not_run": False}, report=True
        )
        assert relaxed.headline != "go", (section.name, failure, relaxed)
        assert not REPORTS[section.name].startswith("# torchcanary: **go**")


def test_no_section_answers_go_when_an_environment_is_missing(
    every_section: dict[str, Section], store: SqliteStore
) -> None:
    """The candidate's environment never came up: none of its units, nor any comparison."""
    for section in every_section.values():

        def inject(
            planned: list[PlannedUnit], section: Section = section
        ) -> dict[PlannedUnit, str | None]:
            gone = ("candidate", "both")
            return {u: None if u.env_role in gone else _checked(section, u) for u in planned}

        decision = _decide_after(store, section, inject)
        lost = [u for u in section.planned_units(_plan(section)) if u.env_role != "baseline"]
        assert not decision.go and decision.not_checked == len(lost), section.name
        named = "\n".join(decision.reasons)
        assert all(unit.describe() in named for unit in lost[:10]), (section.name, named)


def test_a_section_whose_judging_raises_is_no_go_naming_it(
    every_section: dict[str, Section], store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception in the section's own code after its units ran: nothing it found can be
    weighed, so the run is no go, whatever its units say."""

    def broken(self: object, view: object, policy: object) -> list[str]:
        raise RuntimeError("injected")

    for section in every_section.values():
        monkeypatch.setattr(type(section), "blocking_reasons", broken)
        decision = _decide_after(store, section, _all_checked(section))
        assert decision.reasons == (
            f"section {section.name} could not judge its results: RuntimeError: injected",
        )
