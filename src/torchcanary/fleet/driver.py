"""A run across the fleet: choose nodes, ship each its sections, commit every result home.

The driver side of ``torchcanary run --fleet``. It connects before anything is written (an
address that cannot be reached is one line and exit 2, with no run left half-made), lists
the nodes and their hardware profiles, and chooses one node per profile (or all of them).
Each chosen node gets one unit per section of the plan (``fleet/section_unit.py``); every
store write the section makes on the node streams back and is committed here at once,
scoped to the node and its profile.

Each unit's end is kept in the run's ledger (section ``fleet``, one row per profile and
section: ``ok``, ``failed`` or ``lost``), so a node that dies leaves its unfinished work
recorded as lost, never silently missing; ``--resume`` sends again only the units not
``ok``, and those skip what their profile already stored.

Each unit holds its node's GPUs and other accelerators (or ``--fleet-gpus N`` of them),
and its ledger row keeps what it asked for and what it saw (``devices``). A unit that saw
fewer GPUs than its profile has ran nothing: its row is ``not checked`` with why, the
reports say so, and the decision warns (``node_kit/devices.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.accounting import plan_units
from torchcanary.contract import ROWS_TABLE
from torchcanary.errors import ConfigError, FleetError
from torchcanary.fleet import connect
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.node_side import DEVICES_OP
from torchcanary.fleet.relay import replay
from torchcanary.fleet.secrets import strip_text
from torchcanary.fleet.section_unit import RUN_SECTION
from torchcanary.fleet.unit import UnitStatus, WorkUnit
from torchcanary.fleet.unit_time import UNIT_SECONDS, unit_estimate
from torchcanary.hardware_profile import FleetNode, HardwareProfile, NodeSelection
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide, undone_work
from torchcanary.progress import Progress
from torchcanary.report.view import FLEET_ARTIFACT, load_run_view
from torchcanary.report_kit.ledger import LEDGER_SECTION, NOT_CHECKED
from torchcanary.runner import RunInputs, start_run
from torchcanary.section_types import PlannedUnit
from torchcanary.sections import get_section
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SectionResult
from torchcanary.store.schema import PRIMARY_KEYS

if TYPE_CHECKING:
    from torchcanary.fleet.slurm_site import SlurmSite

FLEET_SCHEMA = 1
# Per hardware profile, per section: the items its nodes were not asked about, with why.
NotAsked = dict[str, dict[str, dict[str, str]]]


@dataclass(frozen=True)
class FleetRequest:
    """What ``--fleet``, ``--fleet-nodes``, ``--fleet-select`` and ``--fleet-dir`` asked for."""

    address: str
    selection: NodeSelection
    connect_timeout_s: float = 15.0
    fleet_dir: Path | None = None
    gpus: int | None = None  # --fleet-gpus: this many of each node's GPUs; None: all
    slurm_site: SlurmSite | None = None  # [fleet.slurm] and --slurm-args, on Slurm

    def __post_init__(self) -> None:
        if self.gpus is not None and self.gpus < 1:
            raise ConfigError(
                f"--fleet-gpus {self.gpus}: give a whole number of GPUs, at least 1 "
                "(leave it out to give each unit all of its node's GPUs)"
            )


def connect_fleet(request: FleetRequest) -> Executor:
    """The executor for ``request.address`` (Ray or Slurm, ``fleet/connect.py``);
    FleetError or ConfigError (exit 2) when it cannot be used."""
    return connect.connect_fleet(
        request.address,
        timeout_s=request.connect_timeout_s,
        fleet_dir=request.fleet_dir,
        slurm_site=request.slurm_site,
    )


@dataclass
class FleetRun:
    """The venue of a run on the fleet behind ``executor``: one unit per profile and
    section, every result committed home (``runner.execute`` drives it)."""

    executor: Executor
    request: FleetRequest
    chosen: list[FleetNode] = field(default_factory=list)
    missing_profiles: dict[str, str] = field(default_factory=dict)  # profile -> its last node

    def open(self, run: RunInputs, resume_run_id: str | None) -> str:
        live = self.executor.discover()
        if resume_run_id is None:
            self.chosen = self.request.selection.choose(live)
            if not self.chosen:
                profiles = ", ".join(sorted({node.profile.key for node in live})) or "none"
                raise ConfigError(
                    f"no node of the fleet matches --fleet-select; its profiles: {profiles}"
                )
        else:
            self.chosen, self.missing_profiles = _nodes_to_resume(run.store, resume_run_id, live)
        _check_gpus(self.request.gpus, self.chosen)
        run_id = start_run(run.store, run.plan, resume_run_id)
        notes = list(self.executor.discovery_notes)
        if self.executor.silent_nodes:
            silent = ", ".join(self.executor.silent_nodes)
            notes.append(f"left out: no answer from node(s) {silent} during discovery")
        if resume_run_id is None:
            fleet = _fleet_json(self.request, self.executor.engine, self.chosen, notes)
            run.store.save_artifact(run_id, FLEET_ARTIFACT, "application/json", fleet)
        run.progress.note(f"run {run_id} -> {run.store.location}")
        for note in notes:
            run.progress.note(note)
        for node in self.chosen:
            run.progress.note(
                f"profile {node.profile.key}: node {node.node_id[:12]} ({node.address})"
            )
        return run_id

    def carry_out(self, run: RunInputs, run_id: str) -> dict[str, str]:
        plan, store = run.plan, run.store
        for profile, node_id in self.missing_profiles.items():
            for section in plan.sections:
                why = f"no live node of profile {profile} to resume on"
                _ledger(store.scoped(node_id, profile), run_id, section, UnitStatus.LOST, why, 0.0)
        units, assignments, not_asked = _units(run, run_id, self.chosen, self.request.gpus)
        failures = _collect(
            self.executor, assignments, units, store, run_id, run.progress, not_asked
        )
        for profile in self.missing_profiles:
            for section in plan.sections:
                failures[f"{section}@{profile}"] = f"lost: no live node of profile {profile}"
        return failures

    def planned_units(self, run: RunInputs) -> dict[str, list[PlannedUnit]]:
        # The whole plan; each profile is held to the plan fitted to it (``_decide``).
        return plan_units(run.plan)

    def decide(
        self, run: RunInputs, run_id: str, failures: dict[str, str]
    ) -> tuple[Decision, dict[str, Any]]:
        return _decide(run.store, run_id, run.plan, failures), {}

    def close(self, run: RunInputs, run_id: str, failures: dict[str, str]) -> None:
        lost = [unit for unit, why in failures.items() if why.startswith(UnitStatus.LOST.value)]
        if lost:
            # Decided on what it has, but not done: `run --resume` picks it up and sends
            # the lost units again.
            run.store.set_run_status(run_id, "interrupted")
            run.progress.note(
                f"{len(lost)} unit(s) lost with their node ({', '.join(lost)}); "
                "`torchcanary run --resume` sends them again"
            )


def _check_gpus(gpus: int | None, chosen: list[FleetNode]) -> None:
    """ConfigError (exit 2) when ``--fleet-gpus`` asks more GPUs than a chosen node has."""
    short = [node for node in chosen if gpus is not None and node.gpus < gpus]
    if short:
        named = ", ".join(f"{node.profile.key} has {node.gpus}" for node in short)
        raise ConfigError(
            f"--fleet-gpus {gpus}: {named}; lower it, or leave those profiles out "
            "with --fleet-select"
        )


def expected_gpus(node: FleetNode, gpus: int | None) -> int:
    """How many GPUs a unit on ``node`` must see: ``--fleet-gpus``, else what the node's
    profile has (its hardware facts), else what the engine says it has."""
    if gpus is not None:
        return gpus
    return node.profile.gpu_count or node.gpus


def _units(
    run: RunInputs, run_id: str, chosen: list[FleetNode], gpus: int | None
) -> tuple[dict[str, tuple[FleetNode, str]], list[Assignment], NotAsked]:
    """Each chosen node's units: its profile's plan's sections not yet ok in the ledger;
    and, per profile and section, the items its hardware cannot do (not sent).

    A unit holds all its node's GPUs and other accelerators (as it holds all its CPUs: a
    section owns its node), or the ``gpus`` asked for.
    """
    plan, store = run.plan, run.store
    created_at = store.run(run_id).created_at
    units: dict[str, tuple[FleetNode, str]] = {}
    assignments = []
    not_asked: NotAsked = {}
    for node in chosen:
        scoped = store.scoped(node.node_id, node.profile.key)
        node_plan, not_asked[node.profile.key] = _fit(plan, node.profile)
        for section, left_out in not_asked[node.profile.key].items():
            for item, why in left_out.items():
                run.progress.note(f"{node.profile.key}: {item} not asked: {why}")
            if section not in node_plan.sections:
                # Nothing of it left for this hardware: nothing to send, the ledger says why.
                _ledger(scoped, run_id, section, UnitStatus.OK, "", 0.0, left_out)
        finished = {
            r.key for r in scoped.section_results(run_id, LEDGER_SECTION) if r.verdict == "ok"
        }
        todo = [section for section in node_plan.sections if section not in finished]
        if node.shortfall:
            # Discovery already saw it cannot be checked: nothing is sent, the ledger says why.
            run.progress.note(f"{node.profile.key}: {node.shortfall}")
            for section in todo:
                _ledger(scoped, run_id, section, NOT_CHECKED, node.shortfall, 0.0)
            continue
        for index, section in enumerate(todo):
            payload = _payload(
                node_plan, run_id, created_at, section, node.profile.key, scoped, first=index == 0
            )
            payload["gpus_expected"] = expected_gpus(node, gpus)
            payload["real_gpus"] = node.profile.gpu_count > 0
            unit = WorkUnit(
                f"{section}@{node.profile.key}",
                RUN_SECTION,
                payload,
                num_cpus=node.cpus,
                num_gpus=node.gpus if gpus is None else gpus,
                resources=dict(node.accelerators),
            )
            units[unit.unit_id] = (node, section)
            estimate = unit_estimate(store, node.profile.key, section, run_id)
            assignments.append(Assignment(node, unit, estimate))
    return units, assignments, not_asked


def _fit(plan: RunPlan, profile: HardwareProfile) -> tuple[RunPlan, dict[str, dict[str, str]]]:
    """``plan`` narrowed by each of its sections to what ``profile``'s hardware can do, and
    per section the items left out with why."""
    node_plan, not_asked = plan, {}
    for section in plan.sections:
        node_plan, left_out = get_section(section).fit_plan(node_plan, profile)
        if left_out:
            not_asked[section] = left_out
    return node_plan, not_asked


def _collect(
    executor: Executor,
    assignments: list[Assignment],
    units: Mapping[str, tuple[FleetNode, str]],
    store: ResultStore,
    run_id: str,
    progress: Progress,
    not_asked: NotAsked,
) -> dict[str, str]:
    """Commit every piece as it arrives and each unit's end in the ledger; what did not end ok.

    A unit's ledger row also names the items its profile was not asked about.
    """
    failures: dict[str, str] = {}
    seen: dict[str, dict[str, Any]] = {}  # per unit: what it was given and saw
    started = time.monotonic()
    with progress.task("fleet units", total=len(assignments)) as task:
        for result in executor.dispatch_streaming(assignments):
            node, section = units[result.unit_id]
            # The node it ran on: an engine may place a unit on any node of its profile.
            scoped = store.scoped(result.node_id or node.node_id, node.profile.key)
            if result.status is UnitStatus.PARTIAL:
                piece = dict(result.output or {})
                if piece.get("op") == DEVICES_OP:
                    seen.setdefault(result.unit_id, {}).update(piece)
                    continue
                what = replay(piece, scoped, run_id)
                task.status(f"{node.profile.key}: {what}")
                continue
            error = result.error or ""
            skipped = not_asked.get(node.profile.key, {}).get(section, {})
            after_s = time.monotonic() - started
            devices = seen.pop(result.unit_id, {})
            devices.pop("op", None)
            status: UnitStatus | str = result.status
            if result.status is UnitStatus.OK and devices.get("not_checked"):
                status, error = NOT_CHECKED, str(devices["not_checked"])
                progress.note(f"{result.unit_id}: {error}")
            _ledger(
                scoped, run_id, section, status, error, after_s, skipped, devices,
                result.noticed_s, result.seconds,
            )  # fmt: skip
            if result.status is not UnitStatus.OK:
                failures[result.unit_id] = (
                    f"{result.status.value} on node {node.node_id[:12]}: {error}"
                )
                progress.note(f"{result.unit_id}: {failures[result.unit_id]}")
            task.advance(f"{result.unit_id}: {_word(status)}")
    return failures


def _word(status: UnitStatus | str) -> str:
    return status.value if isinstance(status, UnitStatus) else status


def _ledger(
    store: ResultStore,
    run_id: str,
    section: str,
    status: UnitStatus | str,
    error: str,
    after_s: float,
    not_asked: Mapping[str, str] | None = None,
    devices: Mapping[str, Any] | None = None,
    noticed_s: float | None = None,
    unit_seconds: float = 0.0,
) -> None:
    """One unit's end, where the report and ``--resume`` find it, with what it was given
    and what it saw (``devices``: ``asked``, ``unit``, ``roles``, ``expected``); a lost
    unit's row says how long its engine took to notice (``noticed_s``); how long the unit
    ran (``unit_seconds``) sizes the same unit's time limit next time (``unit_time.py``)."""
    payload: dict[str, Any] = {
        "error": error or None,
        "noticed_s": noticed_s,
        UNIT_SECONDS: round(unit_seconds, 3),
        "seconds_into_run": round(after_s, 3),
        "not_asked": dict(not_asked or {}),
        "devices": dict(devices or {}),
    }
    store.save_section_result(
        run_id, SectionResult(LEDGER_SECTION, section, "both", _word(status), payload)
    )


def _payload(
    plan: RunPlan,
    run_id: str,
    created_at: float,
    section: str,
    profile: str,
    scoped: ResultStore,
    first: bool,
) -> dict[str, Any]:
    """What a node needs for one section, and nothing else (no store, no secrets)."""
    return {
        "plan": plan.to_json(),
        "run_id": run_id,
        "created_at": created_at,
        "section": section,
        "profile": profile,
        "done_rows": _done_rows(scoped, run_id, section),
        "done_sections": {section: sorted(scoped.done_section_keys(run_id, section))},
        # The first section sent to a node records its environments' manifests, once.
        "record_manifests": first and not scoped.environments(run_id),
    }


def _done_rows(store: ResultStore, run_id: str, section: str) -> dict[str, list[dict[str, Any]]]:
    """The keys of the rows ``section`` already stored in a table of its own (the claims'
    probe results), so the node skips them on ``--resume`` as a local run would."""
    table = get_section(section).result_table
    if table == ROWS_TABLE:
        return {}
    keys = [column for column in PRIMARY_KEYS[table] if column not in ("run_id", "profile")]
    return {table: [dict(zip(keys, row, strict=True)) for row in store.rows(table, run_id, keys)]}


def _fleet_json(
    request: FleetRequest, engine: str, chosen: list[FleetNode], notes: list[str]
) -> bytes:
    """What the run was made on; a ``fleet.json`` without ``engine`` was made on Ray."""
    fleet = {
        "schema": FLEET_SCHEMA,
        "engine": engine,
        "address": strip_text(request.address),
        "gpus": request.gpus,
        "every_node": request.selection.every_node,
        "filters": [list(pair) for pair in request.selection.filters],
        "slurm_site": None if request.slurm_site is None else request.slurm_site.to_json(),
        "discovery_notes": notes,
        "nodes": [
            {
                "node_id": node.node_id,
                "address": node.address,
                "profile": json.loads(node.profile.to_json()),
                "key": node.profile.key,
            }
            for node in chosen
        ],
    }
    return json.dumps(fleet, sort_keys=True).encode()


def stored_fleet(store: ResultStore, run_id: str) -> dict[str, Any] | None:
    """The fleet a run was made on, as recorded when it started; None for a local run."""
    for name, _, content in store.artifacts(run_id):
        if name == FLEET_ARTIFACT:
            data: dict[str, Any] = json.loads(content)
            return data
    return None


def _nodes_to_resume(
    store: ResultStore, run_id: str, live: list[FleetNode]
) -> tuple[list[FleetNode], dict[str, str]]:
    """For each profile the run chose, a live node of it now (the same one if it lives).

    Profiles with no live node are returned with the node that ran them before: their
    units are lost again, and say why.
    """
    fleet = stored_fleet(store, run_id)
    if fleet is None:
        raise FleetError(f"run {run_id} was not made on a fleet; resume it without --fleet")
    by_profile: dict[str, list[FleetNode]] = {}
    for node in live:
        by_profile.setdefault(node.profile.key, []).append(node)
    chosen, missing = [], {}
    for recorded in fleet["nodes"]:
        profile = HardwareProfile.from_json(json.dumps(recorded["profile"])).key
        candidates = by_profile.get(profile, [])
        same = [node for node in candidates if node.node_id == recorded["node_id"]]
        if same or candidates:
            chosen.append((same or candidates)[0])
        else:
            missing[profile] = recorded["node_id"]
    return chosen, missing


def _decide(
    store: ResultStore, run_id: str, plan: RunPlan, failures: Mapping[str, str]
) -> Decision:
    """Go only when every profile checked every unit it was sent and none objects, on any
    profile. A profile's units are the plan fitted to its hardware; a section whose unit
    saw too few GPUs checked none of its units: undone work, as the core's rule says."""
    reasons: list[str] = []
    warnings: list[str] = []
    unchecked: list[str] = []
    count = 0
    checked = False
    hardware = _recorded_profiles(store, run_id)
    for profile, node_id in store.run_profiles(run_id).items():
        view = load_run_view(store.scoped(node_id, profile), run_id)
        # Judge the sections the profile was sent: one left with nothing to ask is not one
        # that "stored no results"; one whose unit saw too few GPUs ran nothing.
        ledger = view.sections.get(LEDGER_SECTION, [])
        too_few = {row.key: row for row in ledger if row.verdict == NOT_CHECKED}
        sent = {row.key for row in ledger} - set(too_few)
        asked = tuple(section for section in plan.sections if section in sent)
        checked = checked or bool(asked) or not too_few
        fitted = _fit(plan, hardware[profile])[0] if profile in hardware else plan
        for section, row in too_few.items():
            units = (
                len(get_section(section).planned_units(fitted)) if section in fitted.sections else 0
            )
            count += max(units, 1)
            unchecked.append(
                f"[{profile}] {section}: {row.payload.get('error')} "
                f"({units} planned unit(s) of it not checked)"
            )
        own = {
            unit.rpartition("@")[0]: why
            for unit, why in failures.items()
            if unit.rpartition("@")[2] == profile
        }
        decision = decide(view, plan.policy, asked, own, plan=fitted)
        reasons += [f"[{profile}] {reason}" for reason in decision.reasons]
        warnings += [f"[{profile}] {warning}" for warning in decision.warnings]
        count += decision.not_checked
    if not store.run_profiles(run_id):
        reasons.append("no node of the fleet stored any result")
    elif not checked:
        reasons.append("no unit of the fleet was checked: each saw too few GPUs")
    return undone_work(reasons, unchecked, count, plan.policy, tuple(warnings))


def _recorded_profiles(store: ResultStore, run_id: str) -> dict[str, HardwareProfile]:
    """Each chosen profile's hardware, as the run recorded it when it started (a record
    this version cannot read is left out: that profile is held to the whole plan)."""
    profiles = {}
    for node in (stored_fleet(store, run_id) or {"nodes": []})["nodes"]:
        try:
            profile = HardwareProfile.from_json(json.dumps(node["profile"]))
        except (ValueError, TypeError):
            continue
        profiles[profile.key] = profile
    return profiles
