"""Drills on the user's own training script, launched the way they launch it.

Orchestrator side. ``[drill] job = "train.py --config small.yaml"`` (or ``--job``) swaps the
built-in tiny GPT for the user's script; everything else is the built-in drills' machinery
(:class:`~torchcanary.drill.drill.DrillRunner`): the same faults and injector, torchrun
restarts, namespaces, bounds and cleanup by token. What differs is only what a job we did
not write lets us see, the contract in ``docs/drills.md``:

- unchanged, it is started by torchrun (``--nproc-per-node`` = ``ranks``) through a shim
  (:mod:`torchcanary.worker.drill.job_shim`) that notes each launch, turns printed lines that
  match ``job_step_pattern`` into steps, and records an exception that escapes the job;
- with ``report_step(step, loss=...)`` it reports its exact steps itself;
- for ``shrink`` and ``reconfigure`` it is started as plain ranks sharing the drill's store
  and recovers in place itself, taking part through ``job_inplace.py``'s contract; a job
  that does not take part, or says it cannot, makes that path absent. A shrink is compared
  with a fault-free run whose world shrinks at the same step (``job_leave.py``).

The fault strikes after step ``at_step`` when the fault-free run showed steps (as the
lowest rank that logs them saw it, when not every rank does), else
``job_fault_after_s`` seconds after launch (default: half the fault-free run's time). The
fault-free run is made first in each environment and kept for every drill of the job
(and on disk, ``kept_references.py``, for later runs);
``{scratch}`` in the job's arguments becomes a fresh folder per run, so its checkpoints
never leak from one run into another.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary import kept
from torchcanary.drill import job_compare, job_exits, job_leave, timeline
from torchcanary.drill.catalog import NETWORK_FAULTS, RESTARTS, DrillSpec
from torchcanary.drill.drill import MAX_RESTARTS, DrillOutcome, DrillRunner, _Run
from torchcanary.drill.faults import Injector
from torchcanary.drill.job_exits import RankDeath
from torchcanary.drill.job_injectors import LeadInjector, TimedInjector
from torchcanary.drill.judging import fault_facts
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.launch import Area, Launcher, LaunchFailed
from torchcanary.drill.netns import RankNetwork
from torchcanary.drill.procs import ProcessSet
from torchcanary.drill.trajectory import LOSS_RTOL, relative_difference
from torchcanary.drill.verdict import DrillVerdict
from torchcanary.stack.overlay import OverlayError, create_overlay, install
from torchcanary.worker.calls import DRILL_USER_JOB
from torchcanary.worker.drill.events import read_events
from torchcanary.worker.drill.job_backward import BACKWARD_VARIABLE
from torchcanary.worker.drill.job_inplace import LEAVE_VARIABLE
from torchcanary.worker.drill.job_report import EVENTS_VARIABLE

PATTERN_VARIABLE = "TORCHCANARY_DRILL_STEP_PATTERN"  # read by the shim (job_shim.py)
SCRATCH_VARIABLE = "TORCHCANARY_DRILL_SCRATCH"
CWD_VARIABLE = "TORCHCANARY_DRILL_JOB_CWD"  # read by the shim: the job starts there
DEFAULT_STEP_PATTERN = (
    r"\bstep\W+(?P<step>\d+)\b(?:.*?\bloss\W+(?P<loss>[-+]?[0-9.]+(?:e[-+]?\d+)?))?"
)
JOB_DEFAULTS: dict[str, Any] = {
    "job": "",
    "job_with": [],
    "job_step_pattern": DEFAULT_STEP_PATTERN,
    "job_rtol": None,
    "job_fault_after_s": None,
    "job_cwd": "",
    "job_env": {},
    "job_fresh_reference": False,
}
IN_PLACE = ("shrink", "reconfigure")  # recovered inside the job, by the job_inplace contract
REFERENCE_BOUND_S = 180.0  # the least time the fault-free run is given
REFERENCE_TRIES = 3  # fault-free runs made while a rank dies of a signal, to count it
_LAUNCHERS = ("torchrun", "python", "python3", "env", "srun", "mpirun")
# Variables the drill or torchrun sets for each rank: a job_env entry may not replace them.
_OWNED_VARIABLES = frozenset(
    [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PYTHONHOME",
    ]
)
_OWNED_PREFIXES = ("TORCHCANARY_", "TORCHELASTIC_")


@dataclass(frozen=True)
class UserJob:
    """The user's job as the drill runs it; ``argv`` is the script (or ``-m module``) and args."""

    argv: tuple[str, ...]
    with_: tuple[str, ...] = ()
    step_pattern: str = DEFAULT_STEP_PATTERN
    rtol: float | None = None  # None: a deterministic job, compared at LOSS_RTOL
    fault_after_s: float | None = None
    cwd: str = "."  # where the job starts; its relative paths (script, files, --with) read here
    env: tuple[tuple[str, str], ...] = ()  # job_env, sorted by name

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    @property
    def tolerance(self) -> float:
        return LOSS_RTOL if self.rtol is None else self.rtol

    def comparison(self) -> str:
        """How the job's steps are compared, in words the report shows."""
        if self.rtol is None:
            return f"as a deterministic job (relative tolerance {LOSS_RTOL:g})"
        return f"as a non-deterministic job, within the tolerance you set (job_rtol {self.rtol:g})"

    def argv_for(self, scratch: Path) -> list[str]:
        return [arg.replace("{scratch}", str(scratch)) for arg in self.argv]

    def files(self) -> list[Path]:
        """The job's own files, whose content decides its fault-free run: the script (or
        the ``-m`` module under ``cwd``), every argument naming a file, local ``job_with``
        projects. Folders given as arguments (data) are known by name only."""
        here = Path(self.cwd)
        found: list[Path] = []
        if self.argv[0] == "-m":
            module = here / Path(*self.argv[1].split("."))
            found += [p for p in (module.with_suffix(".py"), module) if p.exists()]
            args = self.argv[2:]
        else:
            found.append(here / self.argv[0])
            args = self.argv[1:]
        for arg in args:
            if "{scratch}" in arg:
                continue
            for candidate in {arg, arg.partition("=")[2]} - {""}:
                with contextlib.suppress(OSError, ValueError):
                    if (here / candidate).is_file():
                        found.append(here / candidate)
        for requirement in self.with_:
            local = re.sub(r"^(-e|--editable)\s*", "", requirement.strip())
            with contextlib.suppress(OSError, ValueError):
                if local and (here / local).exists():
                    found.append(here / local)
        return found

    def identity(self, environment: str, ranks: int) -> dict[str, Any]:
        """Everything the job's fault-free run depends on, as the reference cache keys it."""
        return {
            "environment": environment,
            "argv": list(self.argv),
            "cwd": str(Path(self.cwd).resolve()),
            "env": [list(pair) for pair in self.env],
            "with": list(self.with_),
            "files": kept.files_digest(self.files()),
            "ranks": ranks,
            "step_pattern": self.step_pattern,
            "rtol": self.rtol,
        }


def parse_job_settings(mapping: dict[str, Any]) -> dict[str, Any]:
    """The job keys of the drill table, checked; ValueError names the problem and the fix."""
    settings = dict(JOB_DEFAULTS)
    job = mapping.get("job", "")
    if not isinstance(job, str):
        raise ValueError(
            f"job = {job!r}: give the script and its arguments as one string, "
            'e.g. "train.py --config small.yaml"'
        )
    settings["job"] = job.strip()
    if settings["job"] or mapping.get("job_cwd"):
        settings["job_cwd"] = _job_cwd(mapping.get("job_cwd", ""))
    if settings["job"]:
        _check_job_text(settings["job"], Path(settings["job_cwd"]))
    settings["job_env"] = _job_env(mapping.get("job_env", {}))
    fresh = mapping.get("job_fresh_reference", False)
    if not isinstance(fresh, bool):
        raise ValueError(f"job_fresh_reference = {fresh!r}: must be true or false")
    settings["job_fresh_reference"] = fresh
    with_ = mapping.get("job_with", [])
    if isinstance(with_, str):
        with_ = [with_]
    if not isinstance(with_, list) or not all(isinstance(w, str) for w in with_):
        raise ValueError(f'job_with = {with_!r}: give requirements as strings, e.g. ["-e ."]')
    settings["job_with"] = [w for w in with_ if w.strip()]
    pattern = mapping.get("job_step_pattern", DEFAULT_STEP_PATTERN)
    try:
        compiled = re.compile(str(pattern))
    except re.error as exc:
        raise ValueError(
            f"job_step_pattern = {pattern!r} is not a regular expression: {exc}"
        ) from exc
    if "step" not in compiled.groupindex:
        raise ValueError(
            f"job_step_pattern = {pattern!r} has no (?P<step>...) group: name the step "
            "number's group step (and the loss's group loss)"
        )
    settings["job_step_pattern"] = str(pattern)
    for key in ("job_rtol", "job_fault_after_s"):
        value = mapping.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{key} = {value!r}: must be a positive number")
        settings[key] = float(value)
    return settings


def _job_cwd(value: Any) -> str:
    """``job_cwd`` as an absolute folder (default: where torchcanary runs)."""
    if not isinstance(value, str):
        raise ValueError(f"job_cwd = {value!r}: give the folder the job starts in as a string")
    folder = Path(value or ".").expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"job_cwd = {value!r} is not a folder (from {os.getcwd()}): give the folder "
            "your job starts in, relative to where torchcanary runs or absolute"
        )
    return str(folder.resolve())


def _job_env(value: Any) -> dict[str, str]:
    """``job_env``: a table of variables, or ``KEY=VALUE`` words (``--job-env``)."""
    if isinstance(value, list):
        table: dict[str, Any] = {}
        for word in value:
            name, equals, text = str(word).partition("=")
            if not equals or not name:
                raise ValueError(
                    f"--job-env {word!r} is not KEY=VALUE: write it as --job-env NAME=value"
                )
            table[name] = text
        value = table
    if not isinstance(value, dict):
        raise ValueError(
            f'job_env = {value!r}: give a table of variables, e.g. job_env = {{ SEED = "1" }}'
        )
    env: dict[str, str] = {}
    for name, text in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ValueError(f"job_env: {name!r} is not a variable name (letters, digits, _)")
        if name in _OWNED_VARIABLES or str(name).startswith(_OWNED_PREFIXES):
            raise ValueError(
                f"job_env: {name} is set by the drill and torchrun for each rank; leave it out"
            )
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise ValueError(f"job_env: {name} = {text!r}: give a string or a number")
        env[str(name)] = str(text)
    return dict(sorted(env.items()))


def _check_job_text(text: str, cwd: Path) -> None:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"job = {text!r} cannot be split like a shell line: {exc}") from exc
    if not argv:
        raise ValueError("job = '': give the script and its arguments")
    if Path(argv[0]).name in _LAUNCHERS or Path(argv[0]).name.startswith("python"):
        raise ValueError(
            f"job = {text!r}: give the script and its arguments, not the launcher "
            "(the drill starts torchrun itself; set ranks or --nproc for --nproc-per-node)"
        )
    if argv[0] == "-m":
        if len(argv) < 2:
            raise ValueError(f"job = {text!r}: -m needs a module name")
        return
    if not (cwd / argv[0]).is_file():
        raise ValueError(
            f"job script {argv[0]!r} not found (from {cwd}): give its path relative to "
            "job_cwd (default: where torchcanary runs), or an absolute one"
        )


def user_job(settings: dict[str, Any]) -> UserJob | None:
    """The job the settings name, or None for the built-in tiny GPT."""
    if not settings.get("job"):
        return None
    return UserJob(
        argv=tuple(shlex.split(settings["job"])),
        with_=tuple(settings.get("job_with") or ()),
        step_pattern=settings.get("job_step_pattern") or DEFAULT_STEP_PATTERN,
        rtol=settings.get("job_rtol"),
        fault_after_s=settings.get("job_fault_after_s"),
        cwd=settings.get("job_cwd") or os.getcwd(),
        env=tuple(sorted((settings.get("job_env") or {}).items())),
    )


@dataclass
class UserLauncher(Launcher):
    """The built-in launcher's torchrun shapes, starting the user's job through the shim."""

    job: UserJob = field(default_factory=lambda: UserJob(("train.py",)))

    @property
    def scratch(self) -> Path:
        return (self.area.root / "scratch").absolute()  # the job may start elsewhere

    def base_env(self) -> dict[str, str]:
        env = super().base_env()
        given = dict(self.job.env)
        # The job keeps its own imports; torchcanary's (the shim, report_step) come first.
        paths = (str(self.import_root), given.pop("PYTHONPATH", None), os.environ.get("PYTHONPATH"))
        env.update(given)
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env[CWD_VARIABLE] = self.job.cwd
        env[EVENTS_VARIABLE] = str(self.area.events.absolute())
        env[PATTERN_VARIABLE] = self.job.step_pattern
        env[SCRATCH_VARIABLE] = str(self.scratch)
        if self.spec.fault == "kill-in-backward":
            env[BACKWARD_VARIABLE] = f"{self.spec.target_rank}:{self.spec.at_step}"
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
    ) -> None:
        """As :class:`DrillRunner`; ``env_path`` is the environment the job's overlay is
        made over."""
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
        self._overlay_problem: str | None = None
        self._prepared = False
        self._job_references: dict[tuple[Any, ...], dict[str, Any]] = {}

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
        outcome = install(
            overlay,
            list(self.job.with_),
            [],
            cwd=Path(self.job.cwd),
            timeout_s=900.0,
            log_path=self.work_dir / "install.log",
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
                ) + _teardown_said(result)
            elif len(deaths) == result["tries"]:
                result["reason"] += f" (in {count})"
        return result

    def _reference_try(self, spec: DrillSpec) -> tuple[dict[str, Any], RankDeath | None]:
        """One fault-free run, and the rank that died of a signal in it, if one did."""
        # Its own bound: a drill may be bounded tightly where a job never notices a hang.
        bound_s = max(spec.drill_timeout_s, REFERENCE_BOUND_S)
        area = Area(self.work_dir / f"reference-job-{time.time_ns()}")
        procs = ProcessSet(area.logs)
        launcher = self._launcher(spec, area, procs)
        started = time.time()
        finished, codes = False, []
        in_place = job_leave.leaving(spec) is not None
        try:
            main = (
                job_leave.start(launcher, spec)
                if in_place
                else [launcher.torchrun_standalone(max_restarts=0)]
            )
            finished = procs.wait_all(main, time.monotonic() + bound_s)
            codes = [p.poll() for p in main]
        except LaunchFailed as exc:
            return {"ok": False, "reason": str(exc), "parallel": "job"}, None
        finally:
            procs.kill_all()
            shutil.rmtree(area.root / "scratch", ignore_errors=True)
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
            "final_step": job_compare.last_step_and_loss(rows)[0],
            "final_loss": job_compare.last_step_and_loss(rows)[1],
            "throughput": timeline.measure(
                job_compare.with_job_steps(events), None
            ).throughput_before,
            "ok": bool(finished and code == 0),
        }
        death = None
        if not finished:
            result["reason"] = (
                f"the job did not finish without a fault within {bound_s:g} s: shorten it "
                "for the drill or raise drill_timeout_s"
            )
        elif code != 0:
            if in_place:
                logs = [_read_log(area.logs / f"rank{r}.log") for r in range(spec.ranks)]
                deaths = job_leave.deaths(codes, logs, events)
                after_end = job_leave.teardown(codes, deaths)
            else:
                deaths = job_exits.torchrun_deaths(procs.log_tail("torchrun", 20000), events)
                after_end = job_exits.teardown(deaths, events, spec.ranks, attempt=0)
            if after_end:  # every step ran: a crash on the way out is no failed run
                result["ok"] = True
                result["teardown_trouble"] = _teardown_json(after_end)
                result["reason"] = "fault-free: every rank ran to its end" + _teardown_said(result)
                return result, None
            death = deaths[0] if deaths else None
            why = death.describe() if death else _first_error(events, procs)
            result["reason"] = f"the job fails without any fault (exit code {code}): {why}"
        return result, death

    # drills ------------------------------------------------------------------------------
    def run(self, spec: DrillSpec) -> DrillOutcome:
        reference = self.reference(spec)
        absent = _absent_in_reference(spec, reference)
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
        return UserLauncher(self.python, self.import_root, spec, area, procs, self.job)

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
        network: RankNetwork | None,
        store_proc: subprocess.Popen[bytes] | None,
    ) -> Injector:
        reference = self.reference(spec)
        logging = sorted({int(row[1]) for row in reference.get("steps") or ()})
        if logging and (len(logging) == spec.ranks or spec.fault == "kill-in-backward"):
            return Injector(spec, network=network, store_host=store_proc)
        if logging:  # it logs on some ranks only (rank 0, most often): theirs is the step
            return LeadInjector(spec, network=network, store_host=store_proc, lead_rank=logging[0])
        at_s = self.job.fault_after_s or 0.5 * float(reference.get("run_s") or 10.0)
        return TimedInjector(spec, network=network, store_host=store_proc, at_s=at_s)

    # measuring and judging ---------------------------------------------------------------
    def _measure(self, spec: DrillSpec, area: Area, run: _Run) -> dict[str, Any]:
        injector = run.injector
        events = job_compare.with_job_steps(run.events)
        fault_t = injector.fault_t
        failed_exit = any(code not in (0, None) for code in run.exit_codes.values())
        figures = timeline.measure(events, fault_t, run.exit_t if failed_exit else None)
        errors = [e for e in events if e["ev"] == "error"]
        own = [e for e in errors if fault_t is None or e["t"] < fault_t]
        after = [e for e in errors if fault_t is not None and e["t"] >= fault_t]
        reference = self.reference(spec)
        final_step, final_loss = job_compare.final_step_and_loss(events)
        deaths = _signal_deaths(spec, area, run)
        # Only a run that should end, and did, has an end to compare with the fault-free one;
        # ranks that crashed on their way out after their last step did end.
        teardown = _teardown(spec, run, deaths)
        finished = spec.recovery != "timeout" and teardown is not None
        recovered = [e for e in events if e["ev"] == "recovered"]
        dumps = sorted(p.name for p in area.flight.glob("*")) if area.flight.exists() else []
        payload: dict[str, Any] = {
            "spec": spec.to_json(),
            "parallel": "job",
            "job": self.job.text,
            "comparison": self.job.comparison(),
            "job_rtol": self.job.tolerance,
            "step_source": job_compare.step_source(run.events),
            "fault_at": "step" if reference.get("steps") else "time",
            "steps_logged_by": sorted({int(row[1]) for row in reference.get("steps") or ()}),
            "struck_in_backward_of_step": next(
                (e["step"] for e in events if e["ev"] == "backward"), None
            ),
            **fault_facts(injector.detail, injector.struck_rank, figures),
            "restarts": max((int(e.get("attempt", 0)) for e in events), default=0),
            "final_step": final_step,
            "final_loss": final_loss if finished else None,
            "last_reported_loss": final_loss,
            "reference_loss": reference.get("final_loss"),
            "reference": {
                k: reference.get(k)
                for k in (
                    *("ok", "final_step", "final_loss", "run_s", "throughput", "step_source"),
                    *("cached", "teardown_trouble", "leave"),
                )
            },
            "in_place": _in_place_facts(spec, events, recovered),
            "unsupported": next((e["reason"] for e in events if e["ev"] == "unsupported"), None),
            "job_errors_before_fault": [e.get("error") for e in own],
            "first_error": after[0]["error"] if after else None,
            "error_kinds": sorted({str(e.get("kind")) for e in after}),
            "exit_codes": run.exit_codes,
            # Under torchrun, those the fault does not explain: of ranks that had finished.
            "signal_deaths": [
                d.to_json() for d in deaths if d.after_done or spec.recovery in IN_PLACE
            ],
            "ran_to_end": finished,
            # Threads each rank still had as the interpreter began to exit (the shim's
            # exit event; the last launch's): where a crash on the way out would start.
            "threads_at_exit": {
                f"rank{e['rank']}": e.get("threads") for e in events if e["ev"] == "exit"
            },
            "teardown_trouble": _teardown_json(teardown or []),
            "bounded_out": run.bounded_out,
            "killed_at_cleanup": len(run.leftovers_killed),
            "flight_recorder": {"dumps": dumps} if dumps else {},
            "timeline": timeline.compact(events, fault_t, injector.detail),
        }
        if finished and fault_t is not None and reference.get("steps"):
            check = job_compare.compare(events, reference["steps"], self.job.tolerance)
            payload["job_step_diffs"] = check.pop("rows")
            payload["step_check"] = check
        shutil.rmtree(area.root / "scratch", ignore_errors=True)  # the job's checkpoints
        return payload

    def _judge(
        self, spec: DrillSpec, run: _Run, payload: dict[str, Any]
    ) -> tuple[DrillVerdict, str]:
        if payload["unsupported"]:
            return DrillVerdict.ABSENT, f"your job cannot {spec.recovery}: {payload['unsupported']}"
        if spec.recovery in IN_PLACE and not payload["in_place"]["opted_in"]:
            return DrillVerdict.ABSENT, _not_taking_part(spec)
        if run.injector.fault_t is None:
            if payload["job_errors_before_fault"]:
                return DrillVerdict.ERROR, (
                    "the job failed on its own before the fault: "
                    f"{payload['job_errors_before_fault'][0]}"
                )
            if not run.events:
                tail = "; ".join(f"{name}: {text[-300:]}" for name, text in run.launch_logs.items())
                return DrillVerdict.ERROR, f"the job never started {tail}".strip()
            if isinstance(run.injector, LeadInjector):
                at = (
                    f"step {spec.at_step} (as rank {run.injector.lead_rank}, which logs it, saw it)"
                )
            elif payload["fault_at"] == "step":
                at = f"step {spec.at_step} on rank {spec.target_rank}"
            else:
                at = f"the fault time on rank {spec.target_rank}"
            return DrillVerdict.ERROR, (
                f"the job never reached {at}, so no fault was injected; {_how_it_ended(run)}"
            )
        detect = payload["detect_s"]
        if spec.recovery == "timeout":
            if detect is None:
                return DrillVerdict.FAILED, (
                    f"{spec.fault} never surfaced in the job within {spec.drill_timeout_s:g} s "
                    "(does it set a timeout on its process group?)"
                )
            kinds = ", ".join(payload["error_kinds"]) or "an exit"
            return DrillVerdict.PASSED, f"surfaced as {kinds} after {detect:.1f} s"
        if not payload["ran_to_end"]:
            why = "bound reached" if run.bounded_out else f"exit codes {run.exit_codes}"
            return DrillVerdict.FAILED, (
                f"the job did not finish after {spec.fault} ({why}); first error: "
                f"{payload['first_error'] or 'none recorded'}"
                + _deaths_said(payload["signal_deaths"], self.reference(spec))
            )
        how = (
            f"restarted {payload['restarts']}x" + _restarts_for_deaths(payload)
            if spec.recovery in RESTARTS
            else f"{spec.recovery} done in place"
            if spec.recovery in IN_PLACE
            else "ran on through the fault"
        )
        check = payload.get("step_check")
        if check is None:
            return DrillVerdict.PASSED, (
                f"{how} and ran to its end; not compared step by step: the job reports no "
                "steps (call report_step, or set job_step_pattern to its log line)"
                + _teardown_said(payload)
            )
        if check["first_difference"] is not None:
            return DrillVerdict.FAILED, job_compare.describe(
                check
            ) + f", compared {self.job.comparison()}"
        ref_step, ref_loss = payload["reference"]["final_step"], payload["reference_loss"]
        if payload["final_step"] != ref_step:
            return DrillVerdict.FAILED, (
                f"the job ended at step {payload['final_step']}, the fault-free run at {ref_step}"
            )
        loss = payload["final_loss"]
        if ref_loss is not None and relative_difference(loss, ref_loss) > self.job.tolerance:
            return DrillVerdict.FAILED, (
                f"final loss {loss} differs from the fault-free {ref_loss}, compared "
                f"{self.job.comparison()}"
            )
        leave = payload["reference"].get("leave")
        if leave:
            how += (
                f" (compared with a fault-free run in which rank {leave['ranks'][0]} leaves "
                f"after step {leave['after_step']})"
            )
        return DrillVerdict.PASSED, (
            f"{how}; ended at step {ref_step} like the fault-free run; "
            f"{job_compare.describe(check)}, compared {self.job.comparison()}"
            + _teardown_said(payload)
        )


def _not_taking_part(spec: DrillSpec) -> str:
    return (
        f"{spec.recovery} recovers in place inside the job, and your job does not "
        "take part: it never called torchcanary.drill.in_place_drill() (see "
        "docs/drills.md, 'Recovering in place')"
    )


def _absent_in_reference(spec: DrillSpec, reference: dict[str, Any]) -> str | None:
    """Why a shrink is absent, as its fault-free run (made in place) already shows: the job
    said it cannot shrink, or never took part. None otherwise."""
    if reference.get("unsupported"):
        return f"your job cannot {spec.recovery}: {reference['unsupported']}"
    if reference.get("opted_in") is False:
        return _not_taking_part(spec)
    return None


def _how_it_ended(run: _Run) -> str:
    """How a job that was never struck ended: its exit codes and the last line it wrote."""
    if run.bounded_out:
        return "it was still running at the drill's bound"
    said = [line for text in run.launch_logs.values() for line in text.splitlines() if line.strip()]
    last = f": {said[-1].strip()[:300]}" if said else ""
    return f"it exited with codes {run.exit_codes}{last}"


def _codes_that_count(spec: DrillSpec, run: _Run) -> dict[str, int | None]:
    """The exits that say whether the job finished: in place, the struck rank's original
    process is the fault's (its replacement, if any, counts instead)."""
    if spec.recovery not in IN_PLACE or run.injector.struck_rank is None:
        return run.exit_codes
    struck = f"main{run.injector.struck_rank}"
    return {name: code for name, code in run.exit_codes.items() if name != struck}


def _signal_deaths(spec: DrillSpec, area: Area, run: _Run) -> list[RankDeath]:
    """Deaths by a signal, each with the rank's last words: in place, of the processes that
    count; under torchrun, of every worker its agents saw die (the struck one too)."""
    if spec.recovery not in IN_PLACE:
        logs = "\n".join(_read_log(path) for path in sorted(area.logs.glob("torchrun*.log")))
        return job_exits.torchrun_deaths(logs, run.events)
    found = []
    for name, code in _codes_that_count(spec, run).items():
        rank, log = _process_rank(name)
        death = job_exits.process_death(rank, code, _read_log(area.logs / f"{log}.log"), run.events)
        if death is not None:
            found.append(death)
    return found


def _process_rank(name: str) -> tuple[int, str]:
    """The rank of an in-place drill's process (``main<rank>``, ``replacement<gen>.<rank>``)
    and the name of its log."""
    generation, _, rank = name.removeprefix("replacement").rpartition(".")
    if not generation:
        rank = name.removeprefix("main")
    return int(rank), f"rank{rank}-join{generation}" if generation else f"rank{rank}"


def _teardown(spec: DrillSpec, run: _Run, deaths: list[RankDeath]) -> list[RankDeath] | None:
    """Whether the job ran to its end: the crashes on the way out after the last step (none
    when every exit that counts is 0), or None when it did not end.

    Under torchrun the last launch must have run whole (``job_exits.teardown``); in place,
    each process that counts must exit 0 or die of a signal after its rank reported done."""
    codes = _codes_that_count(spec, run)
    if all(code == 0 for code in codes.values()):
        return []
    if spec.recovery not in IN_PLACE:
        last = max((int(e.get("attempt", 0)) for e in run.events if e["ev"] == "launch"), default=0)
        return job_exits.teardown(deaths, run.events, spec.ranks, last)
    after_end = {death.rank: death for death in deaths if death.after_done}
    failed = [name for name, code in codes.items() if code != 0]
    if not all(_process_rank(name)[0] in after_end for name in failed):
        return None
    return [after_end[_process_rank(name)[0]] for name in failed]


def _teardown_json(deaths: list[RankDeath]) -> list[dict[str, Any]]:
    return [death.to_json() | {"said": death.describe()} for death in deaths]


def _teardown_said(payload: dict[str, Any]) -> str:
    """The crashes after the last step, in words, for a reason (empty when there were none)."""
    trouble = payload.get("teardown_trouble") or []
    if not trouble:
        return ""
    return "; teardown trouble (not a failure: every step ran): " + "; ".join(
        str(death["said"]) for death in trouble
    )


def _restarts_for_deaths(payload: dict[str, Any]) -> str:
    """Why torchrun restarted more than the fault asks for: a rank died after finishing."""
    last = payload["restarts"]
    early = [d for d in payload["signal_deaths"] if d["attempt"] < last]
    if not early:
        return ""
    return f" ({len(early)} of them after {RankDeath(**early[0]).describe()})"


def _read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _deaths_said(deaths: list[dict[str, Any]], reference: dict[str, Any]) -> str:
    """The signal deaths of a failed drill in words, and how often the fault-free run died."""
    if not deaths:
        return ""
    said = "; ".join(RankDeath(**death).describe() for death in deaths)
    died = reference.get("died_in_tries") or []
    if died:
        said += (
            f"; its fault-free run died of a signal in {len(died)} of "
            f"{reference.get('tries')} tries too"
        )
    return f"; {said}"


def _in_place_facts(
    spec: DrillSpec, events: list[dict[str, Any]], recovered: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """What the job said of its in-place recovery (``job_inplace.py``), or None off that path."""
    if spec.recovery not in IN_PLACE:
        return None
    recovering = [e for e in events if e["ev"] == "recovering"]
    return {
        "opted_in": any(e["ev"] == "in_place" for e in events),
        "dead": recovering[0].get("dead") if recovering else None,
        "replacements": sum(len(e.get("dead") or ()) for e in recovering)
        if spec.recovery == "reconfigure"
        else 0,
        "recovered": [
            {k: v for k, v in e.items() if k not in ("ev", "pid", "attempt")} for e in recovered
        ],
    }
