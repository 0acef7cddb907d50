"""One run from plan to decision: environments, manifests, sections, policy, outputs.

The runner reads top to bottom like the pipeline it drives. Each section runs behind a
guard: an internal failure of one section is recorded and the others still run; the
decision then says that section could not finish.
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from torchcanary.claims.catalog import worker_packages
from torchcanary.context import ROLES, RunContext
from torchcanary.envs.cache import Environment, ensure_environment, resolve_installer
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import CallResult, WorkerProcess, import_root_for
from torchcanary.errors import CanaryError, EnvBuildError
from torchcanary.plan import RunPlan
from torchcanary.policy import Decision, decide
from torchcanary.progress import Progress
from torchcanary.report.render import write_outputs
from torchcanary.report.view import load_run_view
from torchcanary.results import Manifest
from torchcanary.sections import get_section
from torchcanary.store.base import ResultStore
from torchcanary.worker.calls import COLLECT_MANIFEST

SECTION_FAILURE_PREFIX = "section-failure:"


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    decision: Decision
    outputs: dict[str, Path]
    section_failures: dict[str, str]


def prepare_environments(plan: RunPlan, progress: Progress) -> dict[str, Environment]:
    """Both environments, built or reused at once: a cold build is mostly pip waiting on
    downloads and unpacking, and the two do not need each other."""
    specs = {"baseline": parse_env_spec(plan.baseline), "candidate": parse_env_spec(plan.candidate)}
    installer = resolve_installer(plan.installer)  # here, not in the threads: see uv_binary
    environments = {}
    with progress.task("environments", total=len(ROLES)) as task:

        def ensure(role: str) -> Environment:
            return ensure_environment(
                role,
                specs[role],
                installer=installer,
                progress=lambda message: task.status(f"{role}: {message}"),
            )

        with ThreadPoolExecutor(max_workers=len(ROLES)) as pool:
            pending = {role: pool.submit(ensure, role) for role in ROLES}
            for role in ROLES:
                environments[role] = pending[role].result()
                task.advance(f"{role}: {specs[role].text}")
    for role, env in environments.items():
        how = "reused from cache" if env.reused else f"built in {env.build_seconds:.0f} s"
        progress.note(f"{role}: torch {env.torch_version} ({how}) at {env.path}")
    return environments


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
            Manifest.from_json(call.value),
        )


def import_root(plan: RunPlan, work_dir: Path) -> Path:
    """torchcanary plus the top-level packages of probe modules, plugins and claims packs."""
    packages = {"torchcanary"} | worker_packages(plan)
    return import_root_for(tuple(sorted(packages)), work_dir / "import-root")


def execute(
    plan: RunPlan,
    store: ResultStore,
    output_dir: Path,
    progress: Progress,
    resume_run_id: str | None = None,
) -> RunOutcome:
    """Run (or resume) ``plan``; every finished unit is in ``store`` as soon as it exists."""
    clock = time.monotonic()
    environments = prepare_environments(plan, progress)  # before the run exists: no husk
    seconds = {"environments": time.monotonic() - clock}
    if resume_run_id is None:
        run_id = store.create_run(plan.to_json())
    else:
        run_id = resume_run_id
        store.set_run_status(run_id, "running")
    progress.note(f"run {run_id} -> {store.location}")
    work_dir = output_dir / "work" / run_id
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(
        run_id=run_id,
        store=store,
        plan=plan,
        environments=environments,
        import_root=import_root(plan, work_dir),
        work_dir=work_dir,
        progress=progress,
        resume=resume_run_id is not None,
    )
    failures: dict[str, str] = {}
    try:
        clock = time.monotonic()
        record_manifests(ctx)
        seconds["manifests"] = time.monotonic() - clock
        for section in plan.sections:
            clock = time.monotonic()
            try:
                get_section(section).run(ctx)
            except CanaryError:
                raise  # a user mistake: stop with its message, as at start-up
            except Exception as exc:  # one broken section must not take the run with it
                failures[section] = f"{type(exc).__name__}: {exc}"
                store.save_artifact(
                    run_id,
                    SECTION_FAILURE_PREFIX + section,
                    "text/plain",
                    traceback.format_exc().encode(),
                )
                progress.note(f"section {section} failed: {failures[section]}")
            finally:
                ctx.close_workers()
                seconds[section] = time.monotonic() - clock
    except BaseException:
        store.set_run_status(run_id, "interrupted")
        raise
    view = load_run_view(store, run_id)
    decision = decide(view, plan.policy, plan.sections, failures)
    # Where this invocation's time went (a resumed run counts only what it redid).
    detail = decision.to_json() | {"section_failures": failures, "seconds": seconds}
    store.finish_run(run_id, decision.label, detail)
    outputs = write_outputs(load_run_view(store, run_id), output_dir)
    return RunOutcome(run_id, decision, outputs, failures)
