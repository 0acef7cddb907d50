"""Which compile phase made a cold compile slower, and what changed in the graphs.

Each side compiles the benchmark's step several times in a worker of its own
(:mod:`torchcanary.worker.explain.compile_phases`), two rounds ordered A B B A; repeat ``i``
of one side is paired with repeat ``i`` of the other. A phase's share is its change in
seconds over the change in the whole cold call, with a Fieller interval (``shares``) over
the pairs; the part of the call no named phase accounts for (guards, running the compiled
code, phases too small to name) is "unexplained". Graph counts, graph breaks and their
reasons are diffed beside it: a new break is a cause in its own right, though its cost
shows up spread over the phases.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from torchcanary.envs.worker_env import compile_env, thread_env
from torchcanary.explain.cause import Cause
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.explain.ops import (
    MIN_SHARE,
    REPEATS,
    Interval,
    ProfileFailed,
    Worker,
    both_sides,
    no_change,
    paired_shares,
    size,
    told_apart,
)
from torchcanary.explain.shares import listed
from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import COMPILE, WORKLOAD_COLD, spec_for_side
from torchcanary.worker.calls import EXPLAIN_COMPILE_PHASES

# The phases, outermost first, as the worker names them (each without the ones inside it).
PHASES = ("dynamo", "aot_autograd", "inductor", "codegen_and_cpp_compile")


@dataclass(frozen=True)
class PhaseChange:
    """One phase's mean seconds per cold compile, baseline then candidate, and its share."""

    phase: str
    seconds: tuple[float, float]
    share: Interval | None  # None: not computable (a delta of zero)

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "seconds": list(self.seconds), "share": listed(self.share)}


@dataclass(frozen=True)
class GraphDiff:
    """Graphs and graph breaks per compile, baseline then candidate, and the break reasons
    only one side has (or has a different number of times)."""

    graphs: tuple[int, int]
    graph_breaks: tuple[int, int]
    reasons_added: tuple[str, ...]
    reasons_removed: tuple[str, ...]
    reasons_changed: tuple[tuple[str, int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "graphs": list(self.graphs),
            "graph_breaks": list(self.graph_breaks),
            "reasons_added": list(self.reasons_added),
            "reasons_removed": list(self.reasons_removed),
            "reasons_changed": [list(r) for r in self.reasons_changed],
        }


@dataclass(frozen=True)
class CompileDiff:
    """The compile of one benchmark on both sides, phase by phase and graph by graph."""

    delta_s: Interval | None  # candidate minus baseline seconds of a cold compiling call
    total_s: tuple[float, float]
    phases: tuple[PhaseChange, ...]  # every phase either side ran, largest share first
    causes: tuple[PhaseChange, ...]  # the phases that account for the delta
    unexplained: Interval | None
    graphs: GraphDiff
    not_run: tuple[str, ...]  # phases neither side ran, with why

    def to_json(self) -> dict[str, Any]:
        return {
            "delta_s": listed(self.delta_s),
            "total_s": list(self.total_s),
            "phases": [p.to_json() for p in self.phases],
            "causes": [p.phase for p in self.causes],
            "unexplained": listed(self.unexplained),
            "graphs": self.graphs.to_json(),
            "not_run": list(self.not_run),
        }


def compile_sides(
    workers: Mapping[str, Worker],
    spec: dict[str, Any],
    repeats: int = REPEATS,
    timeout_s: float = 600.0,
    seconds_left: Callable[[], float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each side's compile samples, one side at a time (compiling is timed: never two at
    once), in two rounds ordered A B B A, so a machine that drifts weighs on both sides
    alike; the rounds' repeats are concatenated, repeat ``i`` of one side beside repeat
    ``i`` of the other. The second round is left out where the first one's pace says it
    would end past ``seconds_left()``."""
    counts = [count for count in ((repeats + 1) // 2, repeats // 2) if count]
    samples: dict[str, dict[str, Any]] = {side: {"repeats": []} for side in workers}
    started = time.monotonic()
    for round_index, count in enumerate(counts):
        if round_index and seconds_left is not None:
            pace_s = (time.monotonic() - started) / counts[0]
            if seconds_left() < pace_s * count:
                break
        order = list(workers) if round_index % 2 == 0 else list(workers)[::-1]
        for side in order:
            kwargs = {"spec": spec_for_side(spec, side), "repeats": count}
            answer = workers[side].call(EXPLAIN_COMPILE_PHASES, kwargs, timeout_s)
            if not answer.ok:
                raise ProfileFailed(
                    f"{side}: compile sample failed ({answer.status}: {answer.error})"
                )
            value = dict(answer.value)
            samples[side] = {**value, "repeats": samples[side]["repeats"] + value["repeats"]}
    return samples


def _most_common(values: list[int]) -> int:
    return Counter(values).most_common(1)[0][0]


def diff_graphs(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]) -> GraphDiff:
    """Graph counts and break reasons of the two sides (the most common count of their
    repeats; a reason's count is its largest in any repeat)."""
    reasons: list[dict[str, int]] = []
    for side in (baseline, candidate):
        seen: dict[str, int] = {}
        for repeat in side:
            for reason, count in (repeat.get("break_reasons") or {}).items():
                seen[reason] = max(seen.get(reason, 0), int(count))
        reasons.append(seen)
    before, after = reasons
    return GraphDiff(
        graphs=(
            _most_common([int(r["graphs"]) for r in baseline]),
            _most_common([int(r["graphs"]) for r in candidate]),
        ),
        graph_breaks=(
            _most_common([int(r["graph_breaks"]) for r in baseline]),
            _most_common([int(r["graph_breaks"]) for r in candidate]),
        ),
        reasons_added=tuple(sorted(set(after) - set(before))),
        reasons_removed=tuple(sorted(set(before) - set(after))),
        reasons_changed=tuple(
            (reason, before[reason], after[reason])
            for reason in sorted(set(before) & set(after))
            if before[reason] != after[reason]
        ),
    )


def diff_compiles(baseline: dict[str, Any], candidate: dict[str, Any]) -> CompileDiff:
    """Both sides' compile samples (the worker's ``sample`` answers) diffed."""
    before, after = baseline["repeats"], candidate["repeats"]
    if not before or len(before) != len(after):
        raise ValueError(
            f"needs the same number of compiles per side, got {len(before)} and {len(after)}; "
            "sample both sides with the same repeats"
        )
    pairs = list(zip(before, after, strict=True))
    ran = [p for p in PHASES if any(p in r["phases"] for r in [*before, *after])]
    deltas = {
        phase: [
            float(c["phases"].get(phase, 0.0)) - float(b["phases"].get(phase, 0.0))
            for b, c in pairs
        ]
        for phase in ran
    }
    totals = [float(c["total_s"]) - float(b["total_s"]) for b, c in pairs]
    delta, phase_shares, left_over = paired_shares(deltas, totals)

    def mean(side: list[dict[str, Any]], phase: str) -> float:
        return sum(float(r["phases"].get(phase, 0.0)) for r in side) / len(side)

    phases = sorted(
        (PhaseChange(p, (mean(before, p), mean(after, p)), phase_shares[p]) for p in ran),
        key=lambda change: -size(change.share),
    )
    causes = tuple(p for p in phases if size(p.share) >= MIN_SHARE and told_apart(p.share))
    backends = {str(baseline.get("backend")), str(candidate.get("backend"))}
    return CompileDiff(
        delta_s=delta,
        total_s=(
            sum(float(r["total_s"]) for r in before) / len(before),
            sum(float(r["total_s"]) for r in after) / len(after),
        ),
        phases=tuple(phases),
        causes=causes,
        unexplained=left_over([p.phase for p in causes]),
        graphs=diff_graphs(before, after),
        not_run=tuple(
            f"{p}: not run by backend {'/'.join(sorted(backends))}" for p in PHASES if p not in ran
        ),
    )


# How the report names each phase.
PHASE_WORDS = {
    "dynamo": "Dynamo tracing",
    "aot_autograd": "AOTAutograd",
    "inductor": "Inductor lowering",
    "codegen_and_cpp_compile": "code generation and kernel compile",
}


def _is_cold_compile(spec: dict[str, Any]) -> bool:
    """A cold compile the worker can redo: a user's workload's (``workload_cold``) or the
    bench's one-shot compile model's cold phase."""
    kind = spec.get("kind")
    return kind == WORKLOAD_COLD or (kind == COMPILE and spec.get("phase") == "cold")


def contribution(diff: CompileDiff, repeats: int, reproduce: str) -> Contribution:
    """The diff as the explain section's causes: the phases that account for the delta, and
    each graph-break reason only the candidate has (their cost lies in the phases' shares)."""
    phase_causes = [
        Cause(
            kind="compile-phase",
            name=PHASE_WORDS.get(change.phase, change.phase),
            share=change.share[0],
            share_low=change.share[1],
            share_high=change.share[2],
            evidence=(
                f"{change.seconds[0]:.3g} -> {change.seconds[1]:.3g} s per cold compile "
                f"(torch compile-time metrics, {repeats} compiles per side, caches off)"
            ),
            reproduce=reproduce,
        )
        for change in diff.causes
        if change.share is not None
    ]
    graphs = diff.graphs
    break_causes = [
        Cause(
            kind="graph-break",
            name=reason.splitlines()[0][:120],
            evidence=(
                f"graphs {graphs.graphs[0]} -> {graphs.graphs[1]}, graph breaks "
                f"{graphs.graph_breaks[0]} -> {graphs.graph_breaks[1]}; reason: {reason}"
            ),
            reproduce=reproduce,
        )
        for reason in graphs.reasons_added
    ]
    not_checked = [f"compile {line}" for line in diff.not_run]
    extra: dict[str, Any] = {"compile": diff.to_json()}
    if diff.delta_s is None or no_change(diff.delta_s):
        estimate, low, high = diff.delta_s or (0.0, 0.0, 0.0)
        not_checked.append(
            f"compile: the repeated compiles show no change to share out (delta "
            f"{estimate:+.3g} s, interval {low:+.3g} to {high:+.3g} s)"
        )
        return Contribution(tuple(break_causes), None, tuple(not_checked), extra)
    return Contribution(
        tuple(phase_causes + break_causes), diff.unexplained, tuple(not_checked), extra
    )


def applies(finding: Finding) -> bool:
    """A moved cold compile (the bench's finding, its spec in ``facts``)."""
    spec = finding.facts.get("spec")
    return finding.kind == "timing" and isinstance(spec, dict) and _is_cold_compile(spec)


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    """Compile the benchmark again on both sides, phase by phase (``facts["spec"]``: the
    benchmark as the bench ran it)."""
    spec = dict(finding.facts["spec"])
    repeats = job.settings.rounds
    threads = int(finding.facts.get("threads") or 1)

    def cold(role: str) -> dict[str, str]:
        scratch = job.ctx.work_dir / "explain-compile" / role
        return {**thread_env(threads), **compile_env(str(scratch))}

    with both_sides(job, cold) as workers:
        timeout_s = job.call_timeout_s()
        samples = compile_sides(workers, spec, repeats, timeout_s, job.seconds_left)
    diff = diff_compiles(samples["baseline"], samples["candidate"])
    reproduce = f"torchcanary run --only bench,explain --explain full  # compiles {finding.item}"
    done = len(samples["baseline"]["repeats"])
    found = contribution(diff, done, reproduce)
    if done < repeats:
        spent = f"compile: {done} of {repeats} compiles per side (explain budget spent)"
        return replace(found, not_checked=(*found.not_checked, spent))
    return found


EXPLAINER: Explainer = FunctionExplainer("compile", applies, explain)
