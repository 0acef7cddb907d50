"""The bench section: measure every benchmark on both sides, judge, commit, and gate.

``run`` schedules the measurements (:mod:`.interleave`), stores the raw samples
(``samples_s``, ``group``, ``round``, ``cpu_s`` per side and benchmark), decides
(:mod:`.compare`) and commits one SectionResult per benchmark with ``env_role="both"``.
A benchmark that skips or fails on any side is committed as ``skipped`` as soon as that
is known, with the reason per side.

Policy keys for ``blocking_reasons`` (defaults in brackets):
- ``bench_max_slowdown`` [0.05]: no-go for a significant slowdown beyond this fraction;
- ``bench_block_on_aa_alarm`` [true]: in an A/A run, no-go when any benchmark differs from
  itself (the harness cannot be trusted on this machine as configured);
- ``bench_block_on_numeric_drift`` [true]: no-go when a user's workload returns outputs
  that differ between the versions beyond its own tolerances (rtol, atol).

A user's workload (``kind = "workload"``) runs in workers started from a per-run overlay of
each environment with the project installed (:mod:`.workload_env`); its payload adds the
facts its preparations reported per side (setup, compile, graph breaks, peak memory) and
the comparison of its outputs between the versions.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from functools import partial
from typing import Any

from torchcanary.bench import compare, sequential, verdicts
from torchcanary.bench.interleave import Interleaver, Measurements
from torchcanary.bench.kept_dispatch import DISPATCH_PROFILES
from torchcanary.bench.kept_facts import FactKind, KeptFacts
from torchcanary.bench.kept_rooflines import ROOFLINES
from torchcanary.bench.payload import measured_payload, skipped_payload
from torchcanary.bench.result import (
    BenchMeasured,
    BenchSkipped,
    BenchVerdict,
    bench_record,
    from_rows,
    unmeasured_verdict,
)
from torchcanary.bench.samples import BASELINE, BASELINE_TWIN, CANDIDATE, BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.settings import parse_settings as _parse
from torchcanary.bench.suite import expand
from torchcanary.bench.workload_env import with_project
from torchcanary.context import RunContext
from torchcanary.envs.build_mismatch import mismatch_in
from torchcanary.envs.cache import cache_root
from torchcanary.plan import RunPlan
from torchcanary.progress import TaskHandle
from torchcanary.section_types import PlannedUnit, PolicyBounds, RunView, UnitOutcome
from torchcanary.store.rows import BOTH, SectionResult
from torchcanary.worker.bench.specs import WORKLOAD

SECTION = "bench"
# Measured and judged, or an honest skip (no such device or feature here); ``not-run``
# (crashed, hung, raised on a side) is not checked.
CHECKED_VERDICTS = frozenset(v.value for v in BenchVerdict if v is not BenchVerdict.NOT_RUN)
VERDICTS = tuple(verdict.value for verdict in BenchVerdict)
POLICY_DEFAULTS: dict[str, Any] = {
    "bench_max_slowdown": 0.05,
    "bench_block_on_aa_alarm": True,
    "bench_block_on_numeric_drift": True,
}
# Numbers a policy may set, refused at load when outside (a 5 meant as 5% among them).
POLICY_BOUNDS: dict[str, PolicyBounds] = {
    "bench_max_slowdown": PolicyBounds(0.0, 1.0, "a fraction of the baseline's time: 0.05 is 5%"),
}


def parse_settings(mapping: dict[str, Any]) -> dict[str, Any]:
    """Validate ``[tool.torchcanary.bench]``; ConfigError names the bad key and the fix."""
    return _parse(mapping).to_json()


def outputs(settings: dict[str, Any]) -> dict[str, Any]:
    """What the bench offers the other sections: ``workloads``, the workload specs it times
    (its ``kind = "workload"`` benchmarks, then its ``workloads`` targets), which the calls
    record too."""
    specs = [dict(s) for s in settings.get("benchmarks", ()) if s.get("kind") == WORKLOAD]
    specs += [{"kind": WORKLOAD, "target": target} for target in settings.get("workloads", ())]
    return {"workloads": specs}


def sides_for(settings: BenchSettings) -> tuple[list[Side], Side, Side | None]:
    """The measured sides, the side judged against the baseline, and the A/A control."""
    if settings.aa:
        return [BASELINE, BASELINE_TWIN], BASELINE_TWIN, None
    if settings.aa_control:
        return [BASELINE, BASELINE_TWIN, CANDIDATE], CANDIDATE, BASELINE_TWIN
    return [BASELINE, CANDIDATE], CANDIDATE, None


def run(ctx: RunContext) -> None:
    """Measure every benchmark on every side, interleaved, and store each one judged."""
    bench = _BenchRun(ctx)
    bench.judge_and_store(bench.measure())


def _worker_context(ctx: RunContext, settings: BenchSettings) -> tuple[RunContext, dict[str, str]]:
    """The context the workers start from, and why a role's install of the project failed.

    Workers start from overlays of the environments with the project installed where a
    workload needs it; where an install failed, the cached environments still run the
    built-in benchmarks and every workload is recorded with the reason."""
    has_workloads = bool(settings.workloads) or any(
        spec["kind"] == WORKLOAD for spec in settings.benchmarks
    )
    environments, install_failed = with_project(
        ctx.environments,
        settings.with_ if has_workloads else (),
        settings.cwd,
        ctx.work_dir,
    )
    worker_ctx = dataclasses.replace(
        ctx, environments=ctx.environments if install_failed else environments
    )
    return worker_ctx, install_failed


class _BenchRun:
    """One run of the bench section, step by step: what to measure and where
    (``__init__``, ``plan``), measuring with sequential looks (``measure``, ``on_look``),
    comparing (``pair_of``, ``decide``) and storing (``commit_skipped``,
    ``judge_and_store``); ``on_group`` reports its progress."""

    _interleaver: Interleaver
    _status: Callable[[str], None]

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        settings = self.settings = BenchSettings.from_json(ctx.plan.section_settings(SECTION))
        self.seed = settings.seed or random.SystemRandom().randrange(1, 2**31)
        self.sides, self.judged, self.control = sides_for(settings)
        self.done = (
            {key for key, _role in ctx.store.done_section_keys(ctx.run_id, SECTION)}
            if ctx.resume
            else set()
        )
        self.confounds = {} if settings.aa else _confounds(ctx)
        self.worker_ctx, self.install_failed = _worker_context(ctx, settings)
        self.max_slowdown = float(policy_rules(ctx.plan.policy)["bench_max_slowdown"])
        # An A/A run measures the harness itself: it always takes every group.
        self.looks = (
            sequential.look_points(settings.groups, settings.first_look, settings.look_every)
            if settings.sequential and not settings.aa
            else ()
        )
        self.settled: dict[str, sequential.Stop] = {}
        self.stop_rule = sequential.StopRule(settings.groups, settings.min_effect)

    def plan(self, device: str) -> list[dict[str, Any]]:
        """The benchmarks still to measure on ``device``; a workload whose install failed
        is committed as skipped instead."""
        specs = [spec for spec in expand(self.settings, device) if spec["id"] not in self.done]
        if not self.install_failed:
            return specs
        for spec in specs:
            if spec["kind"].startswith("workload"):
                unrun = BenchmarkSamples(spec["id"], spec)
                for side in self.sides:
                    if side.role in self.install_failed:
                        unrun.failed[side.name] = {
                            "status": "install-failed",
                            "error": self.install_failed[side.role],
                            "stderr_tail": "",
                        }
                self.commit_skipped(unrun)
        return [spec for spec in specs if not spec["kind"].startswith("workload")]

    def measure(self) -> Measurements:
        """Every planned benchmark measured over the round groups, interleaved."""
        ctx, settings = self.ctx, self.settings
        with ctx.progress.task("bench: interleaved A/B", total=settings.groups) as task:
            self._status = task.status
            self._interleaver = Interleaver(
                self.worker_ctx,
                settings,
                self.sides,
                random.Random(self.seed),
                progress=task.status,
                on_stopped=self.commit_skipped,
                on_look=self.on_look,
                looks=self.looks,
                on_group=partial(self.on_group, task),
                profiles=_kept(DISPATCH_PROFILES, ctx, self.worker_ctx),
                rooflines=_kept(ROOFLINES, ctx, self.worker_ctx),
            )
            return self._interleaver.run(self.plan)

    def on_group(self, task: TaskHandle, groups: int, last_group_s: float) -> None:
        """Progress after each group, with the time left bounded by the last group's: a
        later group measures only what is still unsettled, so it takes no longer (the
        first, which also calibrates, took 44 s and the eighth 5 s in one main job, and
        the pace so far said 8 minutes were left for what took 2)."""
        left = self.settings.groups - groups
        task.advance(
            f"{groups} of {self.settings.groups} groups done", at_most_s=left * last_group_s
        )

    def on_look(self, groups: int) -> None:
        """A sequential look after ``groups`` groups: settle what is clear by now."""
        result = self._interleaver.result
        compared = {b: s for b, s in result.benchmarks.items() if not s.stopped}
        half_band = min(self.settings.equivalence, self.max_slowdown)
        found = sequential.look(
            compared,
            groups,
            self.settled,
            self.pair_of,
            self.decide,
            self.settings.fdr,
            half_band,
            self.stop_rule,
        )
        for bench_id, stop in found.items():
            compared[bench_id].settled_at = groups
            self.settled[bench_id] = stop
        if found:
            self._status(f"after {groups} groups: {len(self.settled)} settled")

    def pair_of(self, samples: BenchmarkSamples) -> dict[str, Any]:
        """The judged side against the baseline, with the A/A control where there is one."""
        clock = compare.clock_for(samples.spec, self.settings.threads, self.settings.clock)
        return compare.compare_pair(
            samples,
            BASELINE.name,
            self.judged.name,
            self.control.name if self.control is not None else None,
            1 - self.settings.fdr,
            clock,
        )

    def decide(
        self, comparisons: dict[str, dict[str, Any]], fdr: float
    ) -> dict[str, dict[str, Any]]:
        return verdicts.decide(
            comparisons,
            fdr,
            self.settings.equivalence,
            self.settings.aa,
            self.settings.min_effect,
            max_slowdown=self.max_slowdown,
        )

    def commit_skipped(self, samples: BenchmarkSamples) -> None:
        if samples.spec["kind"].startswith("workload"):
            self._name_build_mismatches(samples)
        save_raw_samples(self.ctx, self.sides, samples)
        record = bench_record(
            samples.bench_id,
            unmeasured_verdict(samples.failed),
            skipped_payload(samples, self.sides, self.settings, self.seed),
        )
        self.ctx.store.save_section_result(self.ctx.run_id, SectionResult.of(SECTION, record))

    def _name_build_mismatches(self, samples: BenchmarkSamples) -> None:
        """A workload that failed on a torch-family member built for another torch says so
        (envs/build_mismatch.py), with both builds, ahead of its own error."""
        for side in self.sides:
            failed = samples.failed.get(side.name)
            environment = self.worker_ctx.environments.get(side.role)
            if not failed or environment is None:
                continue
            output = f"{failed.get('error', '')}\n{failed.get('stderr_tail', '')}"
            mismatch = mismatch_in(output, environment.python)
            if mismatch:
                failed["error"] = f"{mismatch}; {failed.get('error', '')}"

    def judge_and_store(self, measurements: Measurements) -> None:
        """Judge the benchmarks that ran to the end, with the looks taken, and store each."""
        finished = {b: s for b, s in measurements.benchmarks.items() if not s.stopped}
        looked = sum(1 for groups in self.looks if groups <= measurements.groups_run)
        decided, comparisons = sequential.judge(
            finished, self.settled, self.pair_of, self.decide, self.settings.fdr, looked
        )
        for bench_id, samples in finished.items():
            save_raw_samples(self.ctx, self.sides, samples)
            payload = measured_payload(
                samples,
                self.sides,
                comparisons[bench_id],
                decided[bench_id],
                measurements,
                self.settings,
                self.seed,
                self.confounds,
                self.ctx.work_dir,
            )
            verdict = BenchVerdict(decided[bench_id]["verdict"])
            record = bench_record(bench_id, verdict, payload)
            self.ctx.store.save_section_result(self.ctx.run_id, SectionResult.of(SECTION, record))


def _kept(kind: FactKind, ctx: RunContext, worker_ctx: RunContext) -> KeptFacts:
    """Facts kept from earlier runs (``kind``: dispatch profiles, rooflines), for the
    environments the workers run as they were built (never an environment with this run's
    packages installed over it)."""
    as_built = {
        role: env
        for role, env in worker_ctx.environments.items()
        if env == ctx.environments.get(role)
    }
    manifests = {role: row.manifest for role, row in ctx.store.environments(ctx.run_id).items()}
    folder = cache_root() / kind.folder
    return KeptFacts(kind, folder, as_built, manifests, ctx.run_id, ctx.profile, ctx.progress.note)


def _confounds(ctx: RunContext) -> dict[str, Any]:
    rows = ctx.store.environments(ctx.run_id)
    if "baseline" not in rows or "candidate" not in rows:
        return {}
    return {
        k: list(v)
        for k, v in rows["baseline"].manifest.confounds_against(rows["candidate"].manifest).items()
    }


def save_raw_samples(ctx: RunContext, sides: list[Side], samples: BenchmarkSamples) -> None:
    for side in sides:
        for series, values in samples.flat(side.name).items():
            if values:
                ctx.store.save_measurement(
                    ctx.run_id, side.store_role, samples.bench_id, series, values
                )


def _confound_note(result: BenchMeasured) -> str:
    found = result.confounds
    if not found:
        return ""
    return "; not only torch differs: " + ", ".join(
        f"{key} {values[0]} vs {values[1]}" for key, values in sorted(found.items())
    )


def policy_rules(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The bench keys of ``policy``, defaults filled in: one reading for gate and JUnit."""
    return {**POLICY_DEFAULTS, **(policy or {})}


def _planned_ids(settings: BenchSettings, device: str) -> dict[str, str]:
    """Each benchmark's id on ``device`` -> its id as the plan names it (with the device
    the plan asks for, ``auto`` included: the device is found when the workers start).
    The same settings expand to the same benchmarks, in the same order, on any device."""
    planned = [spec["id"] for spec in expand(settings, settings.device)]
    found = [spec["id"] for spec in expand(settings, device)]
    return dict(zip(found, planned, strict=True)) if len(found) == len(planned) else {}


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """Each benchmark the settings expand to, compared across the sides (``both``)."""
    settings = BenchSettings.from_json(plan.section_settings(SECTION))
    return [PlannedUnit(spec["id"], BOTH) for spec in expand(settings, settings.device)]


def stored_units(view: RunView) -> list[UnitOutcome]:
    """How each planned benchmark ended, its stored id (on the device found) read back as
    the plan names it."""
    settings = BenchSettings.from_json(view.run.plan.get("settings", {}).get(SECTION, {}))
    by_device: dict[str, dict[str, str]] = {}
    outcomes = []
    for result in from_rows(view.sections.get(SECTION, [])):
        device = str(result.spec.get("device", ""))
        if device not in by_device:
            by_device[device] = _planned_ids(settings, device) if device else {}
        item = by_device[device].get(result.key, result.key)
        why = result.reason if isinstance(result, BenchSkipped) else ""
        outcomes.append(UnitOutcome(PlannedUnit(item, result.env_role), result.verdict.value, why))
    return outcomes


def blocking_reasons(view: Any, policy: dict[str, Any]) -> list[str]:
    """Why the bench section says no-go under ``policy`` (see the module docstring)."""
    rules = policy_rules(policy)
    results = from_rows(view.sections.get(SECTION, []))
    reasons = []
    changed = (BenchVerdict.SLOWER, BenchVerdict.FASTER)
    for result in results:
        if isinstance(result, BenchSkipped):
            continue  # unmeasured: not run is the core's rule (``accounting.py``)
        if result.aa:
            if rules["bench_block_on_aa_alarm"] and result.verdict in changed:
                reasons.append(
                    f"A/A run: {result.key} differs from itself "
                    f"({result.slowdown:+.1%}, q = {result.q_value:.2g}); "
                    "the benchmark harness is not trustworthy here as configured"
                )
            continue
        slowdown = result.slowdown
        if (
            result.verdict is BenchVerdict.SLOWER
            and slowdown is not None
            and slowdown > rules["bench_max_slowdown"]
        ):
            reasons.append(
                f"{result.key}: {slowdown:+.1%} slower "
                f"(interval {result.ci_low:.3f}-{result.ci_high:.3f}, "
                f"q = {result.q_value:.2g}), beyond the "
                f"{rules['bench_max_slowdown']:.0%} allowed" + _confound_note(result)
            )
        if rules["bench_block_on_numeric_drift"] and result.numerics_drift:
            reasons.append(
                f"{result.key}: outputs differ between the versions "
                f"({(result.numerics or {})['reason'][:200]})"
            )
    skipped = [result for result in results if isinstance(result, BenchSkipped)]
    if skipped and len(skipped) == len(results):
        first = min(skipped, key=lambda result: result.key)
        reasons.append(
            f"bench: none of the {len(results)} benchmarks was measured on both sides, so "
            f"nothing was compared ({first.key}: {first.reason or 'skipped'})"
        )
    unjudged = [
        result
        for result in results
        if isinstance(result, BenchMeasured) and result.verdict is BenchVerdict.TOO_NOISY
    ]
    if unjudged and len(unjudged) + len(skipped) == len(results):
        # A bench asked for and answered by no verdict at all is not evidence of a go.
        example = min(unjudged, key=lambda result: result.key)
        why = example.reasons[0] if example.reasons else "too noisy"
        reasons.append(
            f"bench: none of the {len(results)} benchmarks could be judged ({example.key}: "
            f"{why[:160]}); give the bench more worker groups (groups >= 3) or a quieter "
            "machine"
        )
    return reasons
