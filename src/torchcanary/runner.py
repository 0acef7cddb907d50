"""One run from plan to decision: environments, manifests, sections, policy, outputs.

The one driver of every run: wherever the sections are carried out (a :class:`Venue`:
this machine, a fleet, ranks across nodes), ``execute`` makes the run, has the venue do
the work, stores the decision and writes the outputs. The runner reads top to bottom like
the pipeline it drives. On this machine each section runs behind a guard: an internal
failure of one section is recorded and the others still run; the decision then says that
section could not finish.
"""

from __future__ import annotations

import functools
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from torchcanary.accounting import PLANNED_ARTIFACT, declaration, plan_units
from torchcanary.context import RunContext
from torchcanary.envs.cache import Environment
from torchcanary.envs.prepare import prepare_environments
from torchcanary.envs.worker_process import CallResult, WorkerProcess, import_root_for
from torchcanary.errors import CanaryError, EnvBuildError
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide
from torchcanary.progress import Progress
from torchcanary.report.evidence import (
    EVIDENCE_ARTIFACT,
    canonical_bytes,
    citation,
    recorded_evidence,
)
from torchcanary.report.render import write_outputs
from torchcanary.report.view import load_run_view, run_so_far
from torchcanary.results import Manifest
from torchcanary.section_types import PlannedUnit
from torchcanary.sections import get_section
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import SECTION_FAILURE_PREFIX
from torchcanary.worker.calls import COLLECT_MANIFEST


@dataclass(frozen=True)
class RunOutcome:
    """What a run left, wherever it ran: its stored run, decision and outputs."""

    run_id: str
    decision: Decision
    outputs: dict[str, Path]
    # What could not finish (a section, or SECTION@PROFILE on a fleet), and why.
    failures: dict[str, str]
    citation: str = ""  # "run R, digest D": what a team cites (report/evidence.py)


def record_manifests(ctx: RunContext) -> None:
    """Each environment's manifest, collected inside it by a worker and stored.

    Both environments are asked at once (each import of torch takes seconds, and nothing
    is timed here); the store is written from this thread only.
    """

    def collect(env: Environment) -> CallResult:
        worker = WorkerProcess(env.python, ctx.import_root)
        try:
            return worker.call(COLLECT_MANIFEST, {}, timeout_s=300)
        finally:
            worker.close()

    roles = list(ctx.environments)
    with ThreadPoolExecutor(max_workers=len(roles)) as pool:
        calls = dict(zip(roles, pool.map(collect, ctx.environments.values()), strict=True))
    for role, env in ctx.environments.items():
        call = calls[role]
        if not call.ok:
            raise EnvBuildError(
                f"the {role} environment ({env.spec.text}) cannot run the "
                f"worker: {call.error}; rebuild it by deleting {env.path}"
            )
        ctx.store.save_environment(
            ctx.run_id,
            role,
            env.spec.text,
            env.python,
            env.torch_version,
            env.build_seconds,
            env.reused,
            Manifest.from_json(call.value | {"torch_family": torch_family(env)}),
        )


def torch_family(env: Environment) -> list[dict[str, object]]:
    """This side's torch and each companion with its build: the environment table's rows."""
    rows: list[dict[str, object]] = [{"name": "torch", "build": env.torch_version}]
    return rows + [companion.to_json() for companion in env.companions]


def import_root(plan: RunPlan, work_dir: Path) -> Path:
    """torchcanary plus the top-level packages the plan's sections' workers import."""
    packages = {"torchcanary"}.union(
        *(get_section(name).worker_packages(plan) for name in plan.sections)
    )
    return import_root_for(tuple(sorted(packages)), work_dir / "import-root")


@dataclass(frozen=True)
class RunInputs:
    """What the driver hands the venue a run is carried out at."""

    plan: RunPlan
    store: ResultStore
    output_dir: Path
    progress: Progress


class Venue(Protocol):
    """Where a run's sections are carried out: this machine (:class:`OnThisMachine`), a
    fleet's profiles (``fleet/driver.py``) or ranks across nodes (``fleet/across_nodes.py``).

    The driver asks each the same five things, in order; what the venue does not know how
    to do (resume, keep time) it leaves out.
    """

    def open(self, run: RunInputs, resume_run_id: str | None) -> str:
        """The run's id: created, or the one to resume marked running again."""
        ...

    def planned_units(self, run: RunInputs) -> dict[str, list[PlannedUnit]]:
        """Each section's units as this venue will run them (after ``open``): the plan's
        on this machine or a fleet, what the ranks run across nodes."""
        ...

    def carry_out(self, run: RunInputs, run_id: str) -> dict[str, str]:
        """Every section, stored as it finishes; what could not finish, and why."""
        ...

    def decide(
        self, run: RunInputs, run_id: str, failures: dict[str, str]
    ) -> tuple[Decision, dict[str, Any]]:
        """The decision, and what the venue adds to its stored detail."""
        ...

    def close(self, run: RunInputs, run_id: str, failures: dict[str, str]) -> None:
        """After the decision is stored (a fleet leaves a run with lost units resumable)."""
        ...


def start_run(store: ResultStore, plan: RunPlan, resume_run_id: str | None) -> str:
    """A new run of ``plan``, or ``resume_run_id`` marked running again."""
    if resume_run_id is None:
        return store.create_run(plan.to_json())
    store.set_run_status(resume_run_id, "running")
    return resume_run_id


@dataclass
class OnThisMachine:
    """The run's sections one by one on this machine, each behind a guard."""

    environments: dict[str, Environment] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    resume: bool = False
    started: float = field(default_factory=time.monotonic)  # set again by ``open``

    def open(self, run: RunInputs, resume_run_id: str | None) -> str:
        clock = time.monotonic()
        self.environments = prepare_environments(run.plan, run.progress)  # no husk before
        self.seconds = {"environments": time.monotonic() - clock}
        self.started = clock
        self.resume = resume_run_id is not None
        run_id = start_run(run.store, run.plan, resume_run_id)
        run.progress.note(f"run {run_id} -> {run.store.location}")
        return run_id

    def planned_units(self, run: RunInputs) -> dict[str, list[PlannedUnit]]:
        return plan_units(run.plan)

    def carry_out(self, run: RunInputs, run_id: str) -> dict[str, str]:
        work_dir = run.output_dir / "work" / run_id
        work_dir.mkdir(parents=True, exist_ok=True)
        ctx = RunContext(
            run_id=run_id,
            store=run.store,
            plan=run.plan,
            environments=self.environments,
            import_root=import_root(run.plan, work_dir),
            work_dir=work_dir,
            progress=run.progress,
            resume=self.resume,
            run_so_far=functools.partial(run_so_far, run.store, run_id),
            started=self.started,
        )
        clock = time.monotonic()
        record_manifests(ctx)
        self.seconds["manifests"] = time.monotonic() - clock
        failures: dict[str, str] = {}
        for section in run.plan.sections:
            clock = time.monotonic()
            try:
                get_section(section).run(ctx)
            except CanaryError:
                raise  # a user mistake: stop with its message, as at start-up
            except Exception as exc:  # one broken section must not take the run with it
                failures[section] = f"{type(exc).__name__}: {exc}"
                run.store.save_artifact(
                    run_id,
                    SECTION_FAILURE_PREFIX + section,
                    "text/plain",
                    traceback.format_exc().encode(),
                )
                run.progress.note(f"section {section} failed: {failures[section]}")
            finally:
                ctx.close_workers()
                self.seconds[section] = time.monotonic() - clock
        return failures

    def decide(
        self, run: RunInputs, run_id: str, failures: dict[str, str]
    ) -> tuple[Decision, dict[str, Any]]:
        view = load_run_view(run.store, run_id)
        # Where this invocation's time went (a resumed run counts only what it redid).
        return decide(view, run.plan.policy, run.plan.sections, failures), {"seconds": self.seconds}

    def close(self, run: RunInputs, run_id: str, failures: dict[str, str]) -> None:
        pass


def declare_units(run: RunInputs, run_id: str, venue: Venue) -> None:
    """Each section's planned units at ``venue``, stored before any runs (a resumed run
    keeps those it declared when it started): the decision holds the run to them
    (``accounting.py``)."""
    if any(name == PLANNED_ARTIFACT for name, _, _ in run.store.artifacts(run_id)):
        return
    units = declaration(venue.planned_units(run))
    run.store.save_artifact(run_id, PLANNED_ARTIFACT, "application/json", units)


def execute(
    plan: RunPlan,
    store: ResultStore,
    output_dir: Path,
    progress: Progress,
    venue: Venue | None = None,
    resume_run_id: str | None = None,
) -> RunOutcome:
    """Run (or resume) ``plan`` at ``venue`` (default this machine): every finished unit
    is in ``store`` as soon as it exists; then the decision, stored, and the outputs."""
    venue = venue or OnThisMachine()
    run = RunInputs(plan, store, output_dir, progress)
    run_id = venue.open(run, resume_run_id)
    try:
        declare_units(run, run_id, venue)
        failures = venue.carry_out(run, run_id)
    except BaseException:
        store.set_run_status(run_id, "interrupted")
        raise
    decision, detail = venue.decide(run, run_id, failures)
    store.finish_run(
        run_id, decision.label, decision.to_json() | {"section_failures": failures} | detail
    )
    venue.close(run, run_id, failures)
    outputs = write_outputs(load_run_view(store, run_id), output_dir)
    # The digest is kept with the run too, so a results.json edited later (and its
    # evidence recomputed) still disagrees with the store: `verify --store`.
    _, evidence = recorded_evidence(outputs["json"])
    if evidence is None:
        raise RuntimeError(f"{outputs['json']} was written without its evidence")
    store.save_artifact(
        run_id, EVIDENCE_ARTIFACT, "application/json", canonical_bytes(evidence.to_json())
    )
    return RunOutcome(run_id, decision, outputs, failures, citation(run_id, evidence))
