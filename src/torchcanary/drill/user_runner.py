"""The drill runner for the user's own job (``drill/user_job.py``): its environment,
its fault-free runs and how it is started and struck.

Orchestrator side. It is :class:`~torchcanary.drill.drill.DrillRunner` with the job's own
launcher (torchrun through the shim, or plain ranks for the in-place recoveries); what a
drill of the job measured, and its verdict, are ``drill/user_outcome.py``'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary.drill import job_compare, job_exits, job_folder, job_leave, timeline, user_outcome
from torchcanary.drill.catalog import NETWORK_FAULTS, RESTARTS, DrillSpec
from torchcanary.drill.drill import MAX_RESTARTS, DrillOutcome, DrillRunner, JobLaunch
from torchcanary.drill.faults import Injector
from torchcanary.drill.job_exits import RankDeath
from torchcanary.drill.job_injectors import (
    LeadBackwardInjector,
    LeadInjector,
    TimedInjector,
    backward_go_file,
    timed_strike_s,
)
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.launch import Area, Launcher, LaunchFailed
from torchcanary.drill.netns import RankNetwork
from torchcanary.drill.result import DrillVerdict
from torchcanary.drill.user_job import (
    CWD_VARIABLE,
    IN_PLACE,
    PATTERN_VARIABLE,
    SCRATCH_VARIABLE,
    UserJob,
)
from torchcanary.envs.build_mismatch import mismatch_in
from torchcanary.envs.companions import Companion, install_order
from torchcanary.process_set import ProcessSet
from torchcanary.user_command.overlay import OverlayError, create_overlay, install
from torchcanary.worker.calls import DRILL_USER_JOB
from torchcanary.worker.drill.events import read_events
from torchcanary.worker.drill.job_backward import BACKWARD_VARIABLE
from torchcanary.worker.drill.job_inplace import LEAVE_VARIABLE
from torchcanary.worker.drill.job_report import EVENTS_VARIABLE

REFERENCE_BOUND_S = 180.0  # the least time the fault-free run is given
REFERENCE_TRIES = 3  # fault-free runs made while a rank dies of a signal, to count it


@dataclass
class UserLauncher(Launcher):
    """The built-in launcher's torchrun shapes, starting the user's job through the shim."""

    job: UserJob = field(default_factory=lambda: UserJob(("train.py",)))

    @property
    def scratch(self) -> Path:
        return (self.area.root / "scratch").absolute()  # the job may start elsewhere

    @property
    def folder(self) -> Path:
        """This attempt's own mirror of the job's folder, where the job starts
        (``job_folder.py``)."""
        return job_folder.in_attempt(self.area.root)

    def base_env(self) -> dict[str, str]:
        env = super().base_env()
        given = dict(self.job.env)
        # The job keeps its own imports; torchcanary's (the shim, report_step) come first.
        paths = (str(self.import_root), given.pop("PYTHONPATH", None), os.environ.get("PYTHONPATH"))
        env.update(given)
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env[CWD_VARIABLE] = str(self.folder)
        env[EVENTS_VARIABLE] = str(self.area.events.absolute())
        env[PATTERN_VARIABLE] = self.job.step_pattern
        env[SCRATCH_VARIABLE] = str(self.scratch)
        if self.spec.fault == "kill-in-backward":
            go_file = backward_go_file(self.area.root)
            env[BACKWARD_VARIABLE] = f"{self.spec.target_rank}:{self.spec.at_step}:{go_file}"
        leave = job_leave.leaving(self.spec)
        if leave:  # a shrink's fault-free run: the target leaves after at_step
            env[LEAVE_VARIABLE] = leave
        # Where a job's Flight Recorder dumps go, if its backend dumps on a timeout (NCCL).
        env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(self.area.flight.absolute() / "rank_"))
        return env

    def job_args(
        self, recovery: str, store: str | None = None, join_generation: int | None = None
    ) -> list[str]:
        self.scratch.mkdir(parents=True, exist_ok=True)
        in_place: list[str] = []
        if recovery in IN_PLACE and store is not None:  # plain ranks: the shim sets the contract
            generation = "-" if join_generation is None else str(join_generation)
            in_place = ["--in-place", recovery, store, generation]
        return ["-m", DRILL_USER_JOB, *in_place, *self.job.argv_for(self.scratch)]


def _first_error(events: list[dict[str, Any]], logs: ProcessSet) -> str:
    """The job's own failure in one line: its exception, else the last line it wrote.

    Ranks that fail alike (a missing file) fail within the same instant, in any order: the
    lowest rank's error is named, so the line is the same from run to run."""
    errors = sorted(
        (e for e in events if e["ev"] == "error"), key=lambda e: (int(e.get("rank", 0)), e["t"])
    )
    if errors:
        return f"rank {errors[0].get('rank')}: {errors[0].get('error')}"
    lines = [line for line in logs.log_tail("torchrun", 4000).splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "it wrote nothing"


def _reference_deaths(
    spec: DrillSpec,
    area: Area,
    procs: ProcessSet,
    codes: list[int | None],
    events: list[dict[str, Any]],
) -> tuple[list[RankDeath], list[RankDeath] | None]:
    """The ranks of a failed fault-free run that died of a signal, and those of them that
    died only on the way out, after every step ran (read from the logs of each rank in
    place, or from torchrun's)."""
    if job_leave.leaving(spec) is not None:
        logs = [user_outcome.read_log(area.logs / f"rank{r}.log") for r in range(spec.ranks)]
        deaths = job_leave.deaths(codes, logs, events)
        return deaths, job_leave.teardown(codes, deaths)
    deaths = job_exits.torchrun_deaths(procs.log_tail("torchrun", 20000), events)
    return deaths, job_exits.teardown(deaths, events, spec.ranks, attempt=0)


class UserJobRunner(DrillRunner):
    """The drill runner for one environment, driving the user's job instead of ours."""

    def __init__(
        self,
        python: str,
        env_path: str,
        import_root: Path,
        work_dir: Path,
        job: UserJob,
        cache: KeptReferences | None = None,
        environment_key: str = "",
        fresh_reference: bool = False,
        companions: tuple[Companion, ...] = (),
    ) -> None:
        """As :class:`DrillRunner`; ``env_path`` is the environment the job's overlay is
        made over, ``companions`` its torch family (the pairs ``job_with`` installs)."""
        super().__init__(
            python,
            import_root,
            work_dir,
            cache,
            environment_key or f"{env_path}|{python}",
            fresh_reference,
        )
        self.env_path = env_path
        self.job = job
        self.companions = companions
        self._overlay_problem: str | None = None
        self._prepared = False
        self._job_references: dict[tuple[Any, ...], dict[str, Any]] = {}
        # Each attempt's mirror of the job's folder, as it was made (by its area's root).
        self._mirrored: dict[Path, dict[str, job_folder.FileState]] = {}

    # the environment: the cached one, or an overlay with the job's requirements ----------
    def _prepare(self) -> str | None:
        """Install ``job_with`` once into an overlay over this environment; why not, or None."""
        if self._prepared:
            return self._overlay_problem
        self._prepared = True
        if not self.job.with_:
            return None
        target = self.work_dir / "overlay"
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            overlay = create_overlay("drill", self.python, self.env_path, target)
        except (OverlayError, OSError) as exc:
            self._overlay_problem = f"cannot create the overlay for --with: {exc}"
            return self._overlay_problem
        first, without_deps = install_order(self.job.with_, self.companions, Path(self.job.cwd))
        outcome = install(
            overlay,
            first,
            [],
            cwd=Path(self.job.cwd),
            timeout_s=900.0,
            log_path=self.work_dir / "install.log",
            without_deps=without_deps,
        )
        if not outcome.ok:
            self._overlay_problem = f"installing {' '.join(self.job.with_)} failed: {outcome.error}"
            return self._overlay_problem
        self.python = overlay.python
        return None

    # references --------------------------------------------------------------------------
    def references(self) -> list[dict[str, Any]]:
        """The fault-free runs made, less a shrink's that the job did not take part in."""
        return [
            ref
            for ref in self._job_references.values()
            if not ref.get("unsupported") and ref.get("opted_in") is not False
        ]

    def reference(self, spec: DrillSpec) -> dict[str, Any]:
        """The job's fault-free run with these ranks in this environment (made once); for a
        shrink, the one whose world shrinks after the same step (``job_leave.py``)."""
        clean = job_leave.reference_spec(spec)
        leave = job_leave.leaving(clean)
        key = (self.job, spec.ranks, leave)
        with self._reference_lock:
            if key not in self._job_references:
                problem = self._prepare()
                if problem:
                    self._job_references[key] = {"ok": False, "reason": problem, "parallel": "job"}
                else:
                    identity = self.job.identity(self.environment_key, spec.ranks)
                    if leave:
                        identity["leave"] = leave
                    self._job_references[key] = self._cached_or_made(clean, identity)
            return self._job_references[key]

    def _run_reference(self, spec: DrillSpec) -> dict[str, Any]:
        """The fault-free run; again (up to REFERENCE_TRIES) while a rank dies of a signal.

        Such a death may not repeat (a gloo worker thread of torch 2.13 and 2.14 that drops
        its last work during interpreter shutdown aborts the rank, now and then, on its way
        out): the tries that died are kept, counted, in ``died_in_tries``."""
        deaths: list[dict[str, Any]] = []
        for attempt in range(1, REFERENCE_TRIES + 1):
            result, death = self._reference_try(spec)
            result["tries"] = attempt
            if death is None:
                break
            deaths.append(death.to_json() | {"said": death.describe()})
        if deaths:
            result["died_in_tries"] = deaths
            count = f"{len(deaths)} of {result['tries']} tries"
            if result["ok"]:
                result["reason"] = (
                    f"fault-free on try {result['tries']}; it died in {count}: {deaths[0]['said']}"
                ) + user_outcome.teardown_said(result)
            elif len(deaths) == result["tries"]:
                result["reason"] += f" (in {count})"
        return result

    def _reference_try(self, spec: DrillSpec) -> tuple[dict[str, Any], RankDeath | None]:
        """One fault-free run, and the rank that died of a signal in it, if one did."""
        # Its own bound: a drill may be bounded tightly where a job never notices a hang.
        bound_s = max(spec.drill_timeout_s, REFERENCE_BOUND_S)
        area = Area(self.work_dir / f"reference-job-{time.time_ns()}")
        procs = ProcessSet(area.logs)
        started = time.time()
        finished, codes = False, []
        try:
            launcher = self._launcher(spec, area, procs)
            main = (
                job_leave.start(launcher, spec)
                if job_leave.leaving(spec) is not None
                else [launcher.torchrun_standalone(max_restarts=0)]
            )
            finished = procs.wait_all(main, time.monotonic() + bound_s)
            codes = [p.poll() for p in main]
        except LaunchFailed as exc:
            self._left_in_folder(area)
            return {"ok": False, "reason": str(exc), "parallel": "job"}, None
        finally:
            procs.kill_all()
            shutil.rmtree(area.root / "scratch", ignore_errors=True)
        result, death = self._reference_result(spec, area, procs, codes, finished, started, bound_s)
        result["left_in_folder"] = self._left_in_folder(area)  # after its times are taken
        first = result.get("started_at_step")
        if result["ok"] and first is not None and first > 1:  # past a first step, 0 or 1
            result["reason"] = (result.get("reason") or "fault-free") + (
                f"; it started at step {first} with no fault injected: it resumed from "
                "state it did not make (a checkpoint in its folder, or at a path outside it); "
                "every drill starts from the same state; to train from the start, remove it "
                "or give its path as {scratch}/..."
            )
        return result, death

    def _reference_result(
        self,
        spec: DrillSpec,
        area: Area,
        procs: ProcessSet,
        codes: list[int | None],
        finished: bool,
        started: float,
        bound_s: float,
    ) -> tuple[dict[str, Any], RankDeath | None]:
        """What a fault-free run showed, and whether it ran fault-free to its end."""
        in_place = job_leave.leaving(spec) is not None
        events = read_events(area.events)
        rows = job_compare.reference_rows(events)
        launches = [float(e["t"]) for e in events if e["ev"] == "launch"]
        code = next((c for c in codes if c != 0), 0) if codes else None
        result: dict[str, Any] = {
            "parallel": "job",
            **(job_leave.facts(spec, events) if in_place else {}),
            "job": self.job.text,
            "comparison": self.job.comparison(),
            "duration_s": time.time() - started,
            "run_s": (time.time() - min(launches)) if launches else None,
            "exit_code": code,
            "steps": rows,
            "step_source": job_compare.step_source(events),
            "started_at_step": min((int(row[0]) for row in rows), default=None),
            "final_step": job_compare.last_step_and_loss(rows)[0],
            "final_loss": job_compare.last_step_and_loss(rows)[1],
            "throughput": timeline.measure(
                job_compare.with_job_steps(events), None
            ).throughput_before,
            "ok": bool(finished and code == 0),
        }
        if not finished:
            result["reason"] = (
                f"the job did not finish without a fault within {bound_s:g} s: shorten it "
                "for the drill or raise drill_timeout_s"
            )
            return result, None
        if code == 0:
            return result, None
        deaths, after_end = _reference_deaths(spec, area, procs, codes, events)
        if after_end:  # every step ran: a crash on the way out is no failed run
            result["ok"] = True
            result["teardown_trouble"] = user_outcome.teardown_json(after_end)
            result["reason"] = "fault-free: every rank ran to its end" + user_outcome.teardown_said(
                result
            )
            return result, None
        death = deaths[0] if deaths else None
        why = death.describe() if death else _first_error(events, procs)
        mismatch = mismatch_in(f"{why}\n{procs.log_tail('torchrun', 8000)}", self.python)
        why = f"{mismatch}; {why}" if mismatch else why
        result["reason"] = f"the job fails without any fault (exit code {code}): {why}"
        return result, death

    # drills ------------------------------------------------------------------------------
    def run(self, spec: DrillSpec) -> DrillOutcome:
        reference = self.reference(spec)
        absent = user_outcome.absent_in_reference(spec, reference)
        if absent:
            return DrillOutcome(
                DrillVerdict.ABSENT, {"reason": absent, "spec": spec.to_json(), "parallel": "job"}
            )
        if not reference.get("ok"):
            return DrillOutcome(
                DrillVerdict.ERROR,
                {"reason": reference.get("reason"), "spec": spec.to_json(), "parallel": "job"},
            )
        last = reference.get("final_step")
        if last is not None and spec.at_step >= last:
            return DrillOutcome(
                DrillVerdict.ERROR,
                {
                    "reason": f"at_step = {spec.at_step} but the fault-free job ends at step "
                    f"{last}: choose at_step below {last}",
                    "spec": spec.to_json(),
                    "parallel": "job",
                },
            )
        return super().run(spec)

    def _launcher(self, spec: DrillSpec, area: Area, procs: ProcessSet) -> Launcher:
        """The job's launcher for one attempt, which starts in its own fresh mirror of the
        job's folder (``job_folder.py``): nothing an attempt writes there reaches another."""
        launcher = UserLauncher(self.python, self.import_root, spec, area, procs, self.job)
        try:
            self._mirrored[area.root] = job_folder.mirror(Path(self.job.cwd), launcher.folder)
        except OSError as exc:
            raise LaunchFailed(f"cannot copy the job's folder {self.job.cwd}: {exc}") from exc
        return launcher

    def _left_in_folder(self, area: Area) -> dict[str, list[str]]:
        """What the attempt created and changed in its mirror of the job's folder; the
        mirror is then removed (checkpoints, megabytes, no evidence)."""
        before = self._mirrored.pop(area.root, None)
        folder = job_folder.in_attempt(area.root)
        left = job_folder.left_behind(before, folder) if before is not None else {}
        shutil.rmtree(folder, ignore_errors=True)
        return left

    def _start(
        self, spec: DrillSpec, launcher: Launcher, network: RankNetwork | None
    ) -> tuple[list[subprocess.Popen[bytes]], subprocess.Popen[bytes] | None, str]:
        """torchrun, as the user runs it, restarting only on the restart paths; plain ranks
        sharing the drill's store for the in-place ones (``job_inplace.py``)."""
        if spec.recovery in IN_PLACE:
            host = network.store_address if network is not None else "127.0.0.1"
            store_proc, store = launcher.store_host(host)
            ranks = [launcher.rank(r, spec.recovery, store, network) for r in range(spec.ranks)]
            return ranks, store_proc, store
        restarts = MAX_RESTARTS if spec.recovery in RESTARTS else 0
        if spec.fault not in ("store-kill", *NETWORK_FAULTS):
            return [launcher.torchrun_standalone(restarts)], None, ""
        host = network.store_address if network is not None else "127.0.0.1"
        store_proc, store = launcher.store_host(host)
        return launcher.torchrun_nodes(store, restarts, network), store_proc, store

    def _injector(
        self,
        spec: DrillSpec,
        area: Area,
        network: RankNetwork | None,
        store_proc: subprocess.Popen[bytes] | None,
    ) -> Injector:
        reference = self.reference(spec)
        logging = sorted({int(row[1]) for row in reference.get("steps") or ()})
        in_backward = spec.fault == "kill-in-backward"
        own_steps = len(logging) == spec.ranks or (in_backward and spec.target_rank in logging)
        if logging and own_steps:
            return Injector(spec, network=network, store_host=store_proc)  # the target's own step
        if logging and in_backward:  # the target is armed once the lead logs the step
            return LeadBackwardInjector(
                spec,
                network=network,
                store_host=store_proc,
                lead_rank=logging[0],
                go_file=backward_go_file(area.root),
            )
        if logging:  # it logs on some ranks only (rank 0, most often): theirs is the step
            return LeadInjector(spec, network=network, store_host=store_proc, lead_rank=logging[0])
        at_s = timed_strike_s(self.job.fault_after_s, reference.get("run_s"), spec.drill_timeout_s)
        return TimedInjector(spec, network=network, store_host=store_proc, at_s=at_s)

    # measuring and judging: drill/user_outcome.py -----------------------------------------
    def _measure(self, spec: DrillSpec, area: Area, run: JobLaunch) -> dict[str, Any]:
        payload = user_outcome.measure(self.job, spec, area, run, self.reference(spec))
        payload["left_in_folder"] = self._left_in_folder(area)
        return payload

    def _judge(
        self, spec: DrillSpec, run: JobLaunch, payload: dict[str, Any]
    ) -> tuple[DrillVerdict, str]:
        return user_outcome.judge(self.job, spec, run, payload, self.reference(spec))
