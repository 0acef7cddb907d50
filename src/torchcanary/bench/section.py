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
from typing import Any

from torchcanary.bench import compare, sequential, verdicts
from torchcanary.bench.interleave import Interleaver
from torchcanary.bench.kept_dispatch import DISPATCH_PROFILES
from torchcanary.bench.kept_facts import FactKind, KeptFacts
from torchcanary.bench.kept_rooflines import ROOFLINES
from torchcanary.bench.payload import measured_payload, skipped_payload
from torchcanary.bench.result import (
    BenchMeasured,
    BenchResult,
    BenchSkipped,
    BenchVerdict,
    from_rows,
)
from torchcanary.bench.result import from_json as record_from_json
from torchcanary.bench.samples import BASELINE, BASELINE_TWIN, CANDIDATE, BenchmarkSamples, Side
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.settings import parse_settings as _parse
from torchcanary.bench.suite import expand
from torchcanary.bench.workload_env import with_project
from torchcanary.context import RunContext
from torchcanary.envs.cache import cache_root
from torchcanary.section_types import NotRun, PolicyBounds
from torchcanary.store.rows import SectionResult

SECTION = "bench"
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


def sides_for(settings: BenchSettings) -> tuple[list[Side], Side, Side | None]:
    """The measured sides, the side judged against the baseline, and the A/A control."""
    if settings.aa:
        return [BASELINE, BASELINE_TWIN], BASELINE_TWIN, None
    if settings.aa_control:
        return [BASELINE, BASELINE_TWIN, CANDIDATE], CANDIDATE, BASELINE_TWIN
    return [BASELINE, CANDIDATE], CANDIDATE, None


def run(ctx: RunContext) -> None:
    settings = BenchSettings.from_json(ctx.plan.section_settings(SECTION))
    seed = settings.seed or random.SystemRandom().randrange(1, 2**31)
    sides, judged, control = sides_for(settings)
    done = (
        {key for key, _role in ctx.store.done_section_keys(ctx.run_id, SECTION)}
        if ctx.resume
        else set()
    )
    confounds = {} if settings.aa else _confounds(ctx)

    has_workloads = bool(settings.workloads) or any(
        spec["kind"] == "workload" for spec in settings.benchmarks
    )
    environments, install_failed = with_project(
        ctx.environments,
        settings.with_ if has_workloads else (),
        settings.cwd,
        ctx.work_dir,
    )
    # Workers start from the overlays; where an install failed, the cached environments
    # still run the built-in benchmarks and every workload is recorded with the reason.
    worker_ctx = dataclasses.replace(
        ctx, environments=ctx.environments if install_failed else environments
    )

    def plan(device: str) -> list[dict[str, Any]]:
        specs = [spec for spec in expand(settings, device) if spec["id"] not in done]
        if not install_failed:
            return specs
        for spec in specs:
            if spec["kind"].startswith("workload"):
                unrun = BenchmarkSamples(spec["id"], spec)
                for side in sides:
                    if side.role in install_failed:
                        unrun.failed[side.name] = {
                            "status": "install-failed",
                            "error": install_failed[side.role],
                            "stderr_tail": "",
                        }
                commit_skipped(unrun)
        return [spec for spec in specs if not spec["kind"].startswith("workload")]

    def commit_skipped(samples: BenchmarkSamples) -> None:
        save_raw_samples(ctx, sides, samples)
        record = bench_record(
            samples.bench_id,
            BenchVerdict.SKIPPED,
            skipped_payload(samples, sides, settings, seed),
        )
        ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))

    confidence = 1 - settings.fdr
    max_slowdown = float(policy_rules(ctx.plan.policy)["bench_max_slowdown"])
    half_band = min(settings.equivalence, max_slowdown)

    def pair_of(samples: BenchmarkSamples) -> dict[str, Any]:
        clock = compare.clock_for(samples.spec, settings.threads, settings.clock)
        return compare.compare_pair(
            samples,
            BASELINE.name,
            judged.name,
            control.name if control is not None else None,
            confidence,
            clock,
        )

    def decide(comparisons: dict[str, dict[str, Any]], fdr: float) -> dict[str, dict[str, Any]]:
        return verdicts.decide(
            comparisons,
            fdr,
            settings.equivalence,
            settings.aa,
            settings.min_effect,
            max_slowdown=max_slowdown,
        )

    # An A/A run measures the harness itself: it always takes every group.
    looks = (
        sequential.look_points(settings.groups, settings.first_look, settings.look_every)
        if settings.sequential and not settings.aa
        else ()
    )
    settled: dict[str, sequential.Stop] = {}
    stop_rule = sequential.StopRule(settings.groups, settings.min_effect)
    interleaver: Interleaver

    def on_look(groups: int) -> None:
        compared = {b: s for b, s in interleaver.result.benchmarks.items() if not s.stopped}
        found = sequential.look(
            compared, groups, settled, pair_of, decide, settings.fdr, half_band, stop_rule
        )
        for bench_id, stop in found.items():
            compared[bench_id].settled_at = groups
            settled[bench_id] = stop
        if found:
            task.status(f"after {groups} groups: {len(settled)} settled")

    with ctx.progress.task("bench: interleaved A/B", total=settings.groups) as task:
        interleaver = Interleaver(
            worker_ctx,
            settings,
            sides,
            random.Random(seed),
            progress=task.status,
            on_stopped=commit_skipped,
            on_look=on_look,
            looks=looks,
            on_group=lambda groups: task.advance(f"{groups} of {settings.groups} groups done"),
            profiles=_kept(DISPATCH_PROFILES, ctx, worker_ctx),
            rooflines=_kept(ROOFLINES, ctx, worker_ctx),
        )
        measurements = interleaver.run(plan)
    finished = {b: s for b, s in measurements.benchmarks.items() if not s.stopped}
    looked = sum(1 for groups in looks if groups <= measurements.groups_run)
    decided, comparisons = sequential.judge(
        finished, settled, pair_of, decide, settings.fdr, looked
    )
    for bench_id, samples in finished.items():
        save_raw_samples(ctx, sides, samples)
        payload = measured_payload(
            samples,
            sides,
            comparisons[bench_id],
            decided[bench_id],
            measurements,
            settings,
            seed,
            confounds,
            ctx.work_dir,
        )
        record = bench_record(bench_id, BenchVerdict(decided[bench_id]["verdict"]), payload)
        ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))


def bench_record(bench_id: str, verdict: BenchVerdict, payload: dict[str, Any]) -> BenchResult:
    """The typed record of a payload assembled below (its fields: ``bench/result.py``)."""
    return record_from_json(
        {"key": bench_id, "env_role": "both", "verdict": verdict, "payload": payload}
    )


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


def not_run(view: Any) -> list[NotRun]:
    """Benchmarks that crashed, hung or raised on the candidate (a skip for a missing
    device or feature is an honest unknown, not listed)."""
    found = []
    for result in from_rows(view.sections.get(SECTION, [])):
        if isinstance(result, BenchSkipped) and "candidate" in result.failed:
            failure = result.failed["candidate"]
            side = "; it runs on the baseline" if result.fails_only_on_candidate else ""
            found.append(
                NotRun(f"{result.key} {failure['status']}{side}", str(failure.get("error", "")))
            )
    return found


def blocking_reasons(view: Any, policy: dict[str, Any]) -> list[str]:
    """Why the bench section says no-go under ``policy`` (see the module docstring)."""
    rules = policy_rules(policy)
    results = from_rows(view.sections.get(SECTION, []))
    reasons = []
    changed = (BenchVerdict.SLOWER, BenchVerdict.FASTER)
    for result in results:
        if isinstance(result, BenchSkipped):
            continue  # a candidate that could not run it: the core's rule (``not_run``)
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
