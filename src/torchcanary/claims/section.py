"""Runs every selected probe in each environment, in one worker per environment, or more
where CPUs would idle (:func:`split_lanes`).

A probe that crashes, hangs or errors is recorded as such and a fresh worker takes over;
each result is committed the moment it exists, so ``--resume`` redoes nothing finished.

Policy keys: ``fail_on_claims`` (list of claim comparisons that mean no-go; default
``["regressed"]``); ``fail_on_sanity`` (a binary sanity check the candidate refutes means
no-go, whatever the baseline showed; default true).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from torchcanary.claims import settings as claims_settings
from torchcanary.claims.catalog import (
    ClaimsSelection,
    PlannedProbe,
    choose_packs,
    requested_torch,
    select_claims,
)
from torchcanary.claims.kept_verdicts import KeptVerdicts, ProbeKey
from torchcanary.claims.records import done_probe_keys, save_probe_result
from torchcanary.claims.view import (
    CATALOG_ARTIFACT,
    PACKS_ARTIFACT,
    ClaimComparison,
    claims_of,
)
from torchcanary.context import ROLES, RunContext
from torchcanary.envs.cache import cache_root
from torchcanary.envs.worker_env import shared_compile_env
from torchcanary.envs.worker_process import CallResult, WorkerProcess
from torchcanary.packs.discovery import discover_packs
from torchcanary.packs.model import ANY_RELEASE
from torchcanary.plan import RunPlan
from torchcanary.probe_registry import ENTRY_POINT_GROUP as PROBES_GROUP
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.section_types import PlannedUnit, UnitOutcome
from torchcanary.worker.calls import RUN_PROBE

if TYPE_CHECKING:
    from torchcanary.section_types import RunView

POLICY_DEFAULTS: dict[str, Any] = {"fail_on_claims": ["regressed"], "fail_on_sanity": True}
# The values a policy key may take, where they are words: refused at load, before the run.
POLICY_CHOICES: dict[str, tuple[str, ...]] = {
    "fail_on_claims": tuple(comparison.value for comparison in ClaimComparison)
}

# A claim checked in an environment ended with what the probe found, or an honest "not
# checkable here" (no GPU); an error, crash or timeout says only that checking broke.
# The untimed probes' lanes: a worker each, holding an imported torch.
MAX_LANES = 4
LANE_MARK = "#"  # candidate#2: the candidate's second lane

CHECKED_VERDICTS = frozenset(
    verdict.value for verdict in Verdict if not verdict.is_failure_of_the_harness
)


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """Each selected claim in each environment, chosen from the plan as ``run`` chooses
    (the release pack the candidate's pin names, when the plan names none)."""
    settings = claims_settings.of(plan)
    selection = select_claims(
        settings.probes,
        settings.probe_modules,
        settings.release,
        settings.regression,
        requested_torch(plan.candidate),
    )
    return [PlannedUnit(probe_id, role) for probe_id in selection.probes for role in ROLES]


def stored_units(view: RunView) -> list[UnitOutcome]:
    """How each claim ended in each environment (its results are ``probe_results`` rows)."""
    return [
        UnitOutcome(
            PlannedUnit(result.probe_id, result.env_role),
            result.outcome.verdict.value,
            result.outcome.summary,
        )
        for result in claims_of(view).probe_results
    ]


def parse_settings(mapping: dict[str, Any]) -> dict[str, Any]:
    """The claims table validated, defaults filled in (``claims/settings.py``)."""
    return claims_settings.parse_settings(mapping)


def outputs(settings: dict[str, Any]) -> dict[str, Any]:
    """What the claims offer the other sections (``claims/settings.py``)."""
    return claims_settings.outputs(settings)


def outcome_of_call(call: CallResult, timeout_s: float) -> Outcome:
    """A worker call's fate as a probe verdict: the worker's failure is the probe's."""
    if call.ok:
        return Outcome.from_json(call.value)
    evidence = {"stderr_tail": call.stderr_tail[-4000:]}
    if call.status == "timeout":
        return Outcome(
            Verdict.TIMEOUT, f"no result within {timeout_s:g} s; worker killed", evidence
        )
    if call.status == "crashed":
        return Outcome(Verdict.CRASHED, call.error, evidence)
    evidence["traceback"] = call.traceback[-6000:]
    return Outcome(Verdict.ERROR, call.error[:500], evidence)


def check_plan(plan: RunPlan) -> None:
    """Refuse a plan whose packs are broken or do not fit the pinned candidate (PackError),
    before any environment is built."""
    settings = claims_settings.of(plan)
    choose_packs(settings.release, settings.regression, requested_torch(plan.candidate))


def worker_packages(plan: RunPlan) -> set[str]:
    """Top-level packages a claims worker must import: every installed pack's and plugin's.

    Workers run in other environments, where only what is linked into their import root
    exists; a pack installed next to torchcanary must travel with it.
    """
    packages = {module.split(".")[0] for module in claims_settings.of(plan).probe_modules}
    for item in discover_packs():
        for module in (item.pack.module, *item.pack.probe_modules):
            packages.add(module.split(".")[0])
    for entry in entry_points(group=PROBES_GROUP):
        packages.add(entry.value.split(":")[0].split(".")[0])
    return packages


def run(ctx: RunContext) -> None:
    settings = claims_settings.of(ctx.plan)
    selection = select_claims(
        settings.probes,
        settings.probe_modules,
        settings.release,
        settings.regression,
        ctx.environments["candidate"].torch_version,
    )
    selected = selection.probes
    _save_catalog(ctx, selection)
    # What each environment was asked to be, for the sanity pack's version check.
    params = {role: {"requested_torch": requested_torch(getattr(ctx.plan, role))} for role in ROLES}
    done = done_probe_keys(ctx.store, ctx.run_id) if ctx.resume else set()
    todo = [(role, pid) for role in ROLES for pid in selected if (role, pid) not in done]
    reuse = KeptVerdicts(
        cache_root() / "claim-verdicts",
        ctx.environments,
        {role: row.manifest for role, row in ctx.store.environments(ctx.run_id).items()},
        ctx.profile,
        fresh=not settings.reuse,
        warn=ctx.progress.note,
    )
    # Only the verdicts of untimed probes are kept for later runs.
    untimed = [(role, pid) for role, pid in todo if not selected[pid].probe.timed]
    keys = {item: _reuse_key(ctx, reuse, selected[item[1]], *item, params) for item in untimed}
    kept = reuse.load_all(keys, ctx.run_id)
    todo = [item for item in todo if item not in kept]
    alone = [(role, pid) for role, pid in todo if selected[pid].probe.timed]
    untimed_todo = {
        role: [pid for r, pid in todo if r == role and not selected[pid].probe.timed]
        for role in ROLES
    }
    lanes = split_lanes(untimed_todo, usable_cpus())
    with ctx.progress.task("claims", total=len(todo) + len(kept)) as task:
        for result in kept.values():
            save_probe_result(ctx.store, result)
            task.advance(f"{result.env_role} {result.probe_id}: {result.outcome.verdict.value}")
        if kept:
            ctx.progress.note(
                f"claims: {len(kept)} verdicts reused from earlier runs of the same "
                "environments on this machine (--fresh-claims runs them again)"
            )
        workers = {
            lane: ctx.new_worker(
                role_of(lane),
                shared_compile_env(str(ctx.work_dir / "claims-compile" / role_of(lane))),
            )
            for lane in dict.fromkeys((*ROLES, *itertools.chain(*lanes.values())))
        }

        def run_one(lane: str, probe_id: str) -> ProbeResult:
            role = role_of(lane)
            return _run_probe(ctx, selected[probe_id], probe_id, role, workers[lane], params)

        # The store and the progress display stay on this thread; lanes only run probes.
        finished = side_by_side(
            untimed_todo,
            lanes,
            run_one,
            on_start=lambda lane, p: task.status(f"{role_of(lane)}: {p}"),
        )
        for result in itertools.chain(finished, (run_one(*item) for item in alone)):
            save_probe_result(ctx.store, result)
            key = keys.get((result.env_role, result.probe_id))
            if key is not None:
                reuse.keep(key, result)
            task.advance(f"{result.env_role} {result.probe_id}: {result.outcome.verdict.value}")


def _reuse_key(
    ctx: RunContext,
    reuse: KeptVerdicts,
    planned: PlannedProbe,
    role: str,
    probe_id: str,
    params: dict[str, dict[str, Any]],
) -> ProbeKey | None:
    """The key a probe's verdict in ``role``'s environment is kept under."""
    timeout_s = claims_settings.of(ctx.plan).probe_timeout_s or planned.probe.timeout_s
    return reuse.key(role, probe_id, planned.source.module, params[role], timeout_s)


def _save_catalog(ctx: RunContext, selection: ClaimsSelection) -> None:
    """The selected probes' descriptions and packs, stored with the run for its report."""
    catalog = {
        pid: planned.probe.describe() | {"plugin": planned.source.plugin, "pack": planned.pack}
        for pid, planned in selection.probes.items()
    }
    packs = [pack.to_json() for pack in selection.packs]
    for name, content in ((CATALOG_ARTIFACT, catalog), (PACKS_ARTIFACT, packs)):
        ctx.store.save_artifact(ctx.run_id, name, "application/json", json.dumps(content).encode())


def _run_probe(
    ctx: RunContext,
    planned: PlannedProbe,
    probe_id: str,
    role: str,
    worker: WorkerProcess,
    params: dict[str, dict[str, Any]],
) -> ProbeResult:
    """One probe in one environment's worker; the worker's failure is the probe's."""
    probe, source = planned.probe, planned.source
    timeout_s = claims_settings.of(ctx.plan).probe_timeout_s or probe.timeout_s
    started = time.time()
    call = worker.call(
        RUN_PROBE,
        {"module": source.module, "probe_id": probe_id, "params": params[role]},
        timeout_s,
    )
    duration = float(call.value.get("duration_s", call.duration_s)) if call.ok else call.duration_s
    outcome = outcome_of_call(call, timeout_s)
    return ProbeResult(ctx.run_id, role, probe_id, outcome, duration, started)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def role_of(lane: str) -> str:
    """The environment a lane's probes run in (``candidate#2`` is the candidate's second)."""
    return lane.partition(LANE_MARK)[0]


def split_lanes(by_role: dict[str, list[str]], cpus: int) -> dict[str, list[str]]:
    """Each environment's lanes for its untimed probes: one per environment with probes,
    and where that leaves CPUs idle (a new candidate against a baseline whose verdicts were
    all kept), several, each with a worker of its own.

    At most ``MAX_LANES`` lanes: each worker holds an imported torch in memory.
    """
    working = {role: pids for role, pids in by_role.items() if pids}
    lanes = max(len(working), min(cpus, MAX_LANES))
    share = lanes // max(len(working), 1)
    split: dict[str, list[str]] = {}
    for role, pids in working.items():
        count = min(share, len(pids))
        split[role] = [role if i == 0 else f"{role}{LANE_MARK}{i + 1}" for i in range(count)]
    return split


def side_by_side(
    probes: dict[str, list[str]],
    lanes: dict[str, list[str]],
    run_one: Callable[[str, str], ProbeResult],
    on_start: Callable[[str, str], None],
) -> Iterator[ProbeResult]:
    """Each environment's probes over its lanes, the lanes at once; results as they finish.

    A lane that is free takes its environment's next probe in the catalogue's order, so a
    long compile in one lane never leaves another idle with probes still waiting behind it
    (dealt out in advance, a new candidate's two lanes ended 13 s apart). One lane per
    environment at least, each with its own worker, so the two environments' probes use
    both cores instead of waiting for each other. ``on_start`` and the results are
    delivered on the caller's thread.
    """
    events: queue.Queue[tuple[str, str, ProbeResult | None]] = queue.Queue()
    lane_ended = ""  # the probe id a lane reports once it has nothing more to give
    waiting = {role: collections.deque(pids) for role, pids in probes.items()}
    taking = threading.Lock()
    stop = threading.Event()

    def next_probe(role: str) -> str | None:
        with taking:
            return waiting[role].popleft() if waiting[role] and not stop.is_set() else None

    def lane(name: str) -> None:
        try:
            while (probe_id := next_probe(role_of(name))) is not None:
                events.put((name, probe_id, None))
                events.put((name, probe_id, run_one(name, probe_id)))
        finally:
            events.put((name, lane_ended, None))

    names = [name for role_lanes in lanes.values() for name in role_lanes]
    pool = ThreadPoolExecutor(max_workers=max(1, len(names)))
    futures = [pool.submit(lane, name) for name in names]
    try:
        running = len(names)
        while running:
            name, probe_id, result = events.get()
            if probe_id == lane_ended:
                running -= 1
            elif result is None:
                on_start(name, probe_id)
            else:
                yield result
        for future in futures:
            future.result()  # a lane's own failure, not a probe's, surfaces here
    finally:
        # Interrupted (Ctrl-C, a store error): no new probe starts, and the caller's
        # clean-up closes the workers, which ends the probes still running.
        stop.set()
        pool.shutdown(wait=False)


def blocking_reasons(view: RunView, policy: dict[str, Any]) -> list[str]:
    fail_on = {
        ClaimComparison(c) for c in policy.get("fail_on_claims", POLICY_DEFAULTS["fail_on_claims"])
    }
    reasons = []
    for row in claims_of(view).rows():
        if row.comparison in fail_on and row.baseline and row.candidate:
            reasons.append(
                f"claim {row.probe_id} {row.comparison.value}: baseline "
                f"{row.baseline.outcome.verdict.value}, candidate "
                f"{row.candidate.outcome.verdict.value} ({row.candidate.outcome.summary[:120]})"
            )
    if policy.get("fail_on_sanity", POLICY_DEFAULTS["fail_on_sanity"]):
        reasons += _sanity_failures(view)
    return reasons


def _sanity_failures(view: RunView) -> list[str]:
    """Release-independent checks the candidate refutes: the wheel is not what it says."""
    claims = claims_of(view)
    sanity_packs = {pack["name"] for pack in claims.packs if pack.get("release") == ANY_RELEASE}
    return [
        f"binary sanity {row.probe_id} {row.candidate.outcome.verdict.value} in the candidate: "
        f"{row.candidate.outcome.summary[:160]}"
        for row in claims.rows()
        if row.description.get("pack") in sanity_packs
        and row.candidate is not None
        and row.candidate.outcome.verdict in (Verdict.REFUTED, Verdict.ABSENT)
    ]
