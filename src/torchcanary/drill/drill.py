"""One drill from start to verdict: launch, inject, react, bound, clean up, measure, judge.

Orchestrator side. Each drill is bounded by ``spec.drill_timeout_s``; whatever happens
(the job hangs, the harness raises, the namespaces cannot be made) the ``finally`` kills
every process carrying the drill's token and deletes its namespaces, and the outcome says
what was left over.

The verdicts, per drill and environment:
- passed: the fault struck and the path did what it promises (for a recovery: the job
  finished with identical replicas and every step it ran, loss and gradient norm, matches
  the fault-free run in the same data-parallel mode; for ``timeout``: the fault surfaced as
  an error; for ``none``: the job finished right despite it);
- failed: the path exists here but did not deliver (no recovery, wrong result, no error);
- absent: this version or backend has no such path (the job said so when it tried);
- not-checkable: the drill cannot run on this machine (no namespaces, too little memory
  in all; a shortfall of the moment, or a fault that could not be injected, is an error);
- error: the harness broke (the job would not even start without a fault);
- flaky: a drill run several times (``drill/repeats.py``) passed some trials, not all.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torchcanary.drill import first_errors, flight, timeline, trajectory
from torchcanary.drill.catalog import ACROSS_NODES_ONLY, NETWORK_FAULTS, RESTARTS, DrillSpec
from torchcanary.drill.faults import Injector
from torchcanary.drill.judging import against_reference, fault_facts, reference_facts
from torchcanary.drill.kept_references import KeptReferences, reference_key
from torchcanary.drill.launch import (
    Area,
    CapacityProblem,
    Launcher,
    LaunchFailed,
    machine_capacity_problem,
)
from torchcanary.drill.netns import NetworkUnavailable, RankNetwork, leftover_namespaces
from torchcanary.drill.netns import why_unavailable as network_unavailable
from torchcanary.drill.result import DrillVerdict
from torchcanary.kept import describe_age, own_files_digest
from torchcanary.process_set import ProcessSet
from torchcanary.worker.drill.events import read_events

POLL_S = 0.05
# One restart for the fault, and room for two more: a gloo thread of torch (2.13 and 2.14
# alike) can abort a rank during interpreter shutdown after its last step, and torchrun
# restarts for that too (the drill names each such death). Under load that happened on two
# attempts in a row once, which at 2 failed a job that had recovered from its fault.
MAX_RESTARTS = 3
# What the fault-free run of the built-in job depends on, of its spec.
_REFERENCE_SHAPE = frozenset(
    ("ranks", "steps", "seed", "ckpt_every", "parallel", "step_pad_s", "timeout_s")
)
# What a drill row keeps of its fault-free run.
REFERENCE_FACTS = ("final_loss", "params_identical", "throughput", "ok", "reason", "parallel")


@dataclass(frozen=True)
class DrillOutcome:
    verdict: DrillVerdict
    payload: dict[str, Any]


@dataclass
class JobLaunch:
    """What one launch of the job left behind, for measuring and judging."""

    events: list[dict[str, Any]]
    injector: Injector
    exit_codes: dict[str, int | None]
    exit_t: float | None
    bounded_out: bool
    leftovers_killed: list[int]
    launch_logs: dict[str, str] = field(default_factory=dict)


def _replace_the_dead(
    events: list[dict[str, Any]],
    replacements: dict[tuple[int, int], subprocess.Popen[bytes]],
    launcher: Launcher,
    store: str,
    network: RankNetwork | None,
) -> None:
    """Start a replacement for each rank a reconfiguring job says died, once per
    generation and rank (``replacements`` holds those started)."""
    for event in events:
        if event["ev"] != "recovering":
            continue
        for dead in event["dead"]:
            slot = (int(event["generation"]), int(dead))
            if slot not in replacements:
                replacements[slot] = launcher.rank(dead, "reconfigure", store, network, slot[0])


def _launch_logs(procs: ProcessSet) -> dict[str, str]:
    """The tails of the launch logs that have anything in them."""
    return {
        name: procs.log_tail(name, 1500)
        for name in ("torchrun", "torchrun-node0", "rank0")
        if procs.log_tail(name)
    }


def _modes_run(events: list[dict[str, Any]]) -> str | None:
    """The data-parallel mode the job's processes said they ran (from their launch events)."""
    modes = sorted({str(e["parallel"]) for e in events if e["ev"] == "launch" and "parallel" in e})
    return "+".join(modes) or None


def _safe_name(key: str) -> str:
    return key.replace(":", "-")


class DrillRunner:
    """Runs drills in one environment (its python), reusing fault-free references."""

    def __init__(
        self,
        python: str,
        import_root: Path,
        work_dir: Path,
        cache: KeptReferences | None = None,
        environment_key: str = "",
        fresh_reference: bool = False,
    ) -> None:
        """``cache`` keeps fault-free runs across runs (None: made once per runner);
        ``environment_key`` names the environment in their key; ``fresh_reference`` makes
        the fault-free run again and replaces the cached one."""
        self.python = python
        self.import_root = import_root
        self.work_dir = work_dir
        self.cache = cache
        self.environment_key = environment_key or python
        self.fresh_reference = fresh_reference
        self._references: dict[tuple[Any, ...], dict[str, Any]] = {}
        # Drills of one environment may run at once (drills.section): one makes the
        # fault-free run they share, the other waits for it.
        self._reference_lock = threading.Lock()

    # references --------------------------------------------------------------------------
    def references(self) -> list[dict[str, Any]]:
        """The fault-free runs made so far (stored by the section as ``reference:<mode>``)."""
        return list(self._references.values())

    def reference(self, spec: DrillSpec) -> dict[str, Any]:
        """The fault-free run with the same job, seeds and data-parallel mode (made once)."""
        clean = replace(spec, fault="none", recovery="reference")
        cache_key = (spec.parallel, spec.ranks, spec.steps, spec.seed, spec.ckpt_every)
        with self._reference_lock:
            if cache_key not in self._references:
                self._references[cache_key] = self._cached_or_made(clean, self._identity(clean))
            return self._references[cache_key]

    def _identity(self, clean: DrillSpec) -> dict[str, Any]:
        """What the built-in job's fault-free run depends on: the environment, the job's
        code (torchcanary's own files) and its shape."""
        return {
            "environment": self.environment_key,
            "job": "built-in",
            "torchcanary_files": own_files_digest(),
            "spec": {k: v for k, v in clean.to_json().items() if k in _REFERENCE_SHAPE},
        }

    def _cached_or_made(self, clean: DrillSpec, ingredients: dict[str, Any]) -> dict[str, Any]:
        """The fault-free run from the on-disk cache when its key matches, else made now."""
        if self.cache is None:
            return self._run_reference(clean)
        key = reference_key(ingredients)
        cached = None if self.fresh_reference else self.cache.load(key)
        if cached is not None:
            age = describe_age(cached["cached"]["age_s"])
            cached["reason"] = (
                f"reused from the cache: made {age} ago for the same job, files and "
                "environment (--fresh-reference makes it again)"
            )
            return cached
        made = self._run_reference(clean)
        self.cache.save(key, made, ingredients)
        return made

    def _run_reference(self, spec: DrillSpec) -> dict[str, Any]:
        area = Area(self.work_dir / f"reference-{spec.parallel}-{time.time_ns()}")
        procs = ProcessSet(area.logs)
        launcher = self._launcher(spec, area, procs)
        started = time.monotonic()
        try:
            main = [launcher.torchrun_standalone(max_restarts=0)]
            finished = procs.wait_all(main, time.monotonic() + spec.drill_timeout_s)
            codes = [p.returncode for p in main]
        except LaunchFailed as exc:
            return {"ok": False, "reason": str(exc)}
        finally:
            procs.kill_all()
            shutil.rmtree(area.checkpoints, ignore_errors=True)
        events = read_events(area.events)
        done = [e for e in events if e["ev"] == "done"]
        digests = sorted({e["digest"] for e in done})
        result: dict[str, Any] = {
            "parallel": _modes_run(events) or spec.parallel,
            "duration_s": time.monotonic() - started,
            "final_loss": done[0]["final_loss"] if done else None,
            "digests": digests,
            "first_step_loss": next((e["loss"] for e in events if e["ev"] == "step"), None),
            "steps": trajectory.reference_steps(events),
            "params_identical": len(digests) == 1 and len(done) == spec.ranks,
            "throughput": timeline.measure(events, None).throughput_before,
            "exit_codes": codes,
        }
        result["ok"] = bool(finished and all(c == 0 for c in codes) and len(done) == spec.ranks)
        if not result["ok"]:
            found = first_errors.collect(events, None, area.logs)
            result["reason"] = (
                f"fault-free run did not finish (exit codes {codes}; {len(done)} of "
                f"{spec.ranks} ranks ended their steps): {first_errors.describe(found)}"
            )
        return result

    # drills ------------------------------------------------------------------------------
    def run(self, spec: DrillSpec) -> DrillOutcome:
        capacity = machine_capacity_problem(spec.ranks)
        if spec.fault in ACROSS_NODES_ONLY:
            nodes = f"{spec.fault} needs ranks on several nodes: drill --fleet ADDR --nodes 2"
            capacity = CapacityProblem(nodes, lasting=True)
        if capacity:
            # Only what the machine cannot do is "not checkable here"; a shortfall of the
            # moment is a drill that did not run.
            verdict = DrillVerdict.NOT_CHECKABLE if capacity.lasting else DrillVerdict.ERROR
            return DrillOutcome(verdict, {"reason": capacity.reason, "spec": spec.to_json()})
        if spec.fault in NETWORK_FAULTS:
            why = network_unavailable(need_tc=spec.fault == "net-slow")
            if why:
                return DrillOutcome(
                    DrillVerdict.NOT_CHECKABLE,
                    {
                        "reason": f"network drills need Linux namespaces: {why}",
                        "spec": spec.to_json(),
                    },
                )
        area = Area(self.work_dir / f"{_safe_name(spec.key)}-{time.time_ns()}")
        procs = ProcessSet(area.logs)
        network: RankNetwork | None = None
        started = time.monotonic()
        try:
            if spec.fault in NETWORK_FAULTS:
                try:
                    network = RankNetwork(procs.token, spec.ranks).__enter__()
                except NetworkUnavailable as exc:  # the machine cannot make namespaces
                    why = f"network drills need Linux namespaces: {exc}"
                    return DrillOutcome(
                        DrillVerdict.NOT_CHECKABLE, {"reason": why, "spec": spec.to_json()}
                    )
            run = self._drive(spec, area, procs, network)
        except NetworkUnavailable as exc:  # the namespaces stood; injecting the fault broke
            why = f"injecting {spec.fault} failed: {exc}"
            return DrillOutcome(DrillVerdict.ERROR, {"reason": why, "spec": spec.to_json()})
        except LaunchFailed as exc:
            cause = first_errors.cause({}, spec.recovery, launch_failed=True)
            return DrillOutcome(
                DrillVerdict.ERROR,
                {"reason": f"{exc}; cause: {cause}", "spec": spec.to_json(), "cause": cause},
            )
        finally:
            killed = procs.kill_all()
            if network is not None:
                network.close()
        run.leftovers_killed = killed
        payload = self._measure(spec, area, run)
        shutil.rmtree(area.checkpoints, ignore_errors=True)  # megabytes each, no evidence
        payload["duration_s"] = time.monotonic() - started
        payload["orphans_after_cleanup"] = procs.alive()
        payload["namespaces_after_cleanup"] = [n for n in leftover_namespaces() if procs.token in n]
        verdict, reason = self._judge(spec, run, payload)
        if verdict is DrillVerdict.FAILED:
            # Where the cause lies, so a drill failing in both versions says whose it is.
            payload["cause"] = first_errors.cause(payload["first_errors"], spec.recovery)
            reason += f"; cause: {payload['cause']}"
        payload["reason"] = reason
        return DrillOutcome(verdict, payload)

    # how the job starts; a job of the user's starts its own way (drill/user_runner.py) ------
    def _launcher(self, spec: DrillSpec, area: Area, procs: ProcessSet) -> Launcher:
        return Launcher(self.python, self.import_root, spec, area, procs)

    def _start(
        self, spec: DrillSpec, launcher: Launcher, network: RankNetwork | None
    ) -> tuple[list[subprocess.Popen[bytes]], subprocess.Popen[bytes] | None, str]:
        """The job's main processes, the store host (if any) and its address."""
        host = network.store_address if network is not None else "127.0.0.1"
        if spec.recovery in RESTARTS and spec.fault not in ("store-kill", "net-down"):
            return [launcher.torchrun_standalone(MAX_RESTARTS)], None, ""
        store_proc, store = launcher.store_host(host)
        if spec.recovery in RESTARTS:
            return launcher.torchrun_nodes(store, MAX_RESTARTS, network), store_proc, store
        flag = spec.recovery if spec.recovery in ("shrink", "reconfigure") else "exit"
        main = [launcher.rank(r, flag, store, network) for r in range(spec.ranks)]
        return main, store_proc, store

    def _injector(
        self,
        spec: DrillSpec,
        area: Area,
        network: RankNetwork | None,
        store_proc: subprocess.Popen[bytes] | None,
    ) -> Injector:
        return Injector(spec, network=network, store_host=store_proc)

    def _drive(
        self, spec: DrillSpec, area: Area, procs: ProcessSet, network: RankNetwork | None
    ) -> JobLaunch:
        """Start the job the way ``spec.recovery`` needs, inject, react, until done."""
        launcher = self._launcher(spec, area, procs)
        main, store_proc, store = self._start(spec, launcher, network)
        injector = self._injector(spec, area, network, store_proc)
        deadline = time.monotonic() + spec.drill_timeout_s
        replacements: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
        settle_deadline: float | None = None
        restored = False
        exit_t: float | None = None
        events: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            events = read_events(area.events)
            injector.poll(events)
            fault_t = injector.fault_t
            errors = [
                e for e in events if e["ev"] == "error" and fault_t is not None and e["t"] > fault_t
            ]
            if errors and spec.recovery == "timeout":
                injector.release()  # the stopped rank may now run into the dead collective
                if settle_deadline is None:
                    settle_deadline = time.monotonic() + 2 * spec.timeout_s + 15
            if (
                spec.fault == "net-down"
                and spec.recovery in RESTARTS
                and not restored
                and fault_t is not None
                and time.time() - fault_t > spec.timeout_s + 5
            ):
                assert network is not None
                network.restore(spec.target_rank)  # the outage ends; can the job come back?
                restored = True
            if spec.recovery == "reconfigure":
                _replace_the_dead(events, replacements, launcher, store, network)
            live = [p for p in [*main, *replacements.values()] if p.poll() is None]
            if not live:
                exit_t = time.time()
                break
            if settle_deadline is not None and time.monotonic() > settle_deadline:
                break
            time.sleep(POLL_S)
        bounded_out = exit_t is None and (
            settle_deadline is None or time.monotonic() <= settle_deadline
        )
        codes = {f"main{i}": p.poll() for i, p in enumerate(main)}
        codes.update({f"replacement{g}.{r}": p.poll() for (g, r), p in replacements.items()})
        # A job never struck says why in its launch logs; a struck one in its events.
        logs = {} if injector.fault_t is not None else _launch_logs(procs)
        return JobLaunch(read_events(area.events), injector, codes, exit_t, bounded_out, [], logs)

    # measuring and judging ---------------------------------------------------------------
    def _measure(self, spec: DrillSpec, area: Area, run: JobLaunch) -> dict[str, Any]:
        injector = run.injector
        events = run.events
        # Only a failed exit is a sign that something noticed; a clean one is the end.
        failed_exit = any(code not in (0, None) for code in run.exit_codes.values())
        figures = timeline.measure(events, injector.fault_t, run.exit_t if failed_exit else None)
        last_attempt = max((int(e.get("attempt", 0)) for e in events), default=0)
        done = [e for e in events if e["ev"] == "done" and int(e.get("attempt", 0)) == last_attempt]
        digests = sorted({e["digest"] for e in done})
        losses = sorted({float(e["final_loss"]) for e in done})
        errors = [e for e in events if e["ev"] == "error"]
        unsupported = [e for e in events if e["ev"] == "unsupported"]
        flight_result: dict[str, Any] = {}
        if injector.fault_t is not None:
            # The store's host is no rank: there is no culprit for the recorder to name.
            fr_target = None if spec.fault == "store-kill" else injector.struck_rank
            fr_dir = area.flight / "attempt0"
            flight_result = flight.analyse(fr_dir / "json", spec.ranks, fr_target)
            flight_result["torch_analyser"] = flight.run_torch_analyser(
                self.python, fr_dir / "pickle", spec.ranks
            )
        recovered = [e for e in events if e["ev"] == "recovered"]
        dumped = flight_result.get("dumped_ranks")
        found = first_errors.collect(
            events, injector.fault_t, area.logs, flight_result.get("finding") if dumped else None
        )
        payload: dict[str, Any] = {
            "spec": spec.to_json(),
            # What ran, as the job's processes said: the drill's row names it, not the spec.
            "parallel": _modes_run(events),
            "restored": recovered[0].get("restored") if recovered else None,
            "old_wrapper_freed": recovered[0].get("old_wrapper_freed") if recovered else None,
            **fault_facts(injector.detail, injector.struck_rank, figures),
            # One loss when the replicas agree; every rank's when they do not.
            "final_loss": losses[0] if len(losses) == 1 else None,
            "final_losses": losses,
            "finished_ranks": len(done),
            "final_world": done[0]["world"] if done else None,
            "params_identical": (len(digests) == 1) if done else None,
            "restarts": last_attempt,
            "first_error": errors[0]["error"] if errors else first_errors.first(found),
            "first_errors": found,
            "error_kinds": sorted({e["kind"] for e in errors}),
            "unsupported": unsupported[0]["reason"] if unsupported else None,
            "exit_codes": run.exit_codes,
            "bounded_out": run.bounded_out,
            "killed_at_cleanup": len(run.leftovers_killed),
            "flight_recorder": flight_result,
            "timeline": timeline.compact(events, injector.fault_t, injector.detail),
        }
        if done and spec.recovery != "timeout":
            payload.update(reference_facts(events, self.reference(spec), REFERENCE_FACTS))
        return payload

    def _judge(
        self, spec: DrillSpec, run: JobLaunch, payload: dict[str, Any]
    ) -> tuple[DrillVerdict, str]:
        if payload["unsupported"]:
            return DrillVerdict.ABSENT, payload["unsupported"]
        if run.injector.fault_t is None:
            if not run.events:
                tail = "; ".join(f"{name}: {text[-300:]}" for name, text in run.launch_logs.items())
                return DrillVerdict.ERROR, f"the job never started {tail}".strip()
            return DrillVerdict.ERROR, (
                f"the job never reached step {spec.at_step} on rank "
                f"{spec.target_rank}, so no fault was injected"
            )
        detect = payload["detect_s"]
        if spec.recovery == "timeout":
            if detect is None:
                return DrillVerdict.FAILED, (
                    f"{spec.fault} never surfaced as an error within {spec.drill_timeout_s:g} s"
                )
            return DrillVerdict.PASSED, (
                f"surfaced as {', '.join(payload['error_kinds'])} error after "
                f"{detect:.1f} s (timeout {spec.timeout_s:g} s)"
            )
        if payload["finished_ranks"] == 0:
            why = "bound reached" if run.bounded_out else f"exit codes {run.exit_codes}"
            return DrillVerdict.FAILED, (
                f"the job did not finish after {spec.fault} ({why}); first "
                f"error: {payload['first_error'] or 'none recorded'}; by source: "
                + first_errors.describe(payload["first_errors"])
            )
        mismatch = against_reference(payload)
        if mismatch is not None:
            return mismatch
        loss, ref = payload["final_loss"], payload["reference_loss"]
        check = payload["step_check"]
        if trajectory.relative_difference(loss, ref) > trajectory.LOSS_RTOL:
            return DrillVerdict.FAILED, f"final loss {loss} differs from the fault-free {ref}"
        how = (
            f"restarted {payload['restarts']}x"
            if spec.recovery in RESTARTS
            else "ran on through the fault"
            if spec.recovery == "none"
            else f"{spec.recovery} done"
        ) + f" under {payload['parallel']}"
        if payload.get("restored"):
            how += f" ({payload['restored']})"
        return DrillVerdict.PASSED, (
            f"{how}; {trajectory.describe(check)}; final loss {loss:.6f} matches "
            f"(|diff| {abs(loss - ref):.2e})"
        )
