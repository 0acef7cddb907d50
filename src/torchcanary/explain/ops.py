"""Which operators (and kernels) account for a slower benchmark, with their shares.

Both environments profile the same prepared benchmark several times
(:mod:`torchcanary.worker.explain.profile_ops`), the sides alternating so each baseline
repeat and the candidate repeat beside it share the machine's state. Ops are matched by
name: added, removed, called more or less often, slower or faster. An op's share is its
change in self time per call over the change in wall time per call; its interval is
Fieller's over the repeat pairs (``shares``). What no named op accounts for (Python work,
waits, ops too small to name) is "unexplained", never spread over the ops.

HolisticTraceAnalysis's ``TraceDiff`` compares op and kernel traces too, but it is not used:
it pulls in 83 packages (pandas, plotly, jupyterlab, pytest) for one name-matched diff, it
reads Chrome trace files where ``key_averages`` already gives the per-name totals, and it
compares two trace sets without the per-repeat intervals the shares need.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from torchcanary.envs.worker_env import thread_env
from torchcanary.envs.worker_process import CallResult, WorkerProcess
from torchcanary.explain import shares
from torchcanary.explain.cause import Cause, view_of
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import STEADY_KINDS, spec_for_side
from torchcanary.worker.calls import BENCH_TIMING, EXPLAIN_PROFILE_OPS

REPEATS = 5
MIN_REPEATS = 3  # the fewest repeats shares are drawn from
MIN_SHARE = 0.05  # a share (of the wall delta) below this is not named as a cause
MAX_CAUSES = 5
_CALLS_TOLERANCE = 0.01  # relative change in calls per benchmark call that counts

Interval = shares.Interval


class Worker(Protocol):
    """What the profiling needs of a worker process (``envs.worker_process.WorkerProcess``)."""

    def call(self, func: str, kwargs: dict[str, Any], timeout_s: float) -> CallResult: ...


class ProfileFailed(Exception):
    """A side could not be prepared or profiled; ``str()`` says which and why."""


ROLES = ("baseline", "candidate")


@contextmanager
def both_sides(
    job: ExplainJob, env_vars: Callable[[str], dict[str, str]] | None = None
) -> Iterator[dict[str, WorkerProcess]]:
    """A fresh worker in each environment (``env_vars(role)`` set before torch starts),
    closed as soon as the explainer is done: the run may explain many findings, and idle
    workers would hold their memory to its end."""
    workers = {
        role: job.ctx.new_worker(role, env_vars(role) if env_vars else None) for role in ROLES
    }
    try:
        yield workers
    finally:
        for worker in workers.values():
            worker.close()


def _checked(side: str, answer: CallResult, doing: str) -> dict[str, Any]:
    if not answer.ok:
        raise ProfileFailed(f"{side}: {doing} failed ({answer.status}: {answer.error})")
    value = dict(answer.value or {})
    if "skipped" in value:
        raise ProfileFailed(f"{side}: {doing} skipped ({value['skipped']})")
    return value


def profile_sides(
    workers: Mapping[str, Worker],
    bench_id: str,
    spec: dict[str, Any],
    repeats: int = REPEATS,
    threads: int | None = None,
    timeout_s: float = 300.0,
    seconds_left: Callable[[], float] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` profiles of one benchmark per side (``baseline``, ``candidate``: each
    runs its own ``spec_for_side``), the sides alternating, their order swapped each repeat
    so neither always goes first; ``threads`` as the bench ran it. No repeat starts that
    the last one's duration says would end past ``seconds_left()``.
    The benchmark is released afterwards."""
    for side, worker in workers.items():
        if threads is not None:
            configure = {"threads": threads}
            _checked(
                side, worker.call(f"{BENCH_TIMING}:configure", configure, timeout_s), "configure"
            )
        prepare = {"bench_id": bench_id, "spec": spec_for_side(spec, side)}
        _checked(side, worker.call(f"{BENCH_TIMING}:prepare", prepare, timeout_s), "prepare")
    profiles: dict[str, list[dict[str, Any]]] = {side: [] for side in workers}
    order = list(workers)
    try:
        last_repeat_s = 0.0
        for repeat in range(repeats):
            left = seconds_left() if seconds_left is not None else float("inf")
            if left < last_repeat_s:
                break
            started = time.monotonic()
            for side in order if repeat % 2 == 0 else order[::-1]:
                answer = workers[side].call(EXPLAIN_PROFILE_OPS, {"bench_id": bench_id}, timeout_s)
                profiles[side].append(_checked(side, answer, f"profile {repeat + 1}"))
            last_repeat_s = time.monotonic() - started
    finally:
        for worker in workers.values():
            worker.call(f"{BENCH_TIMING}:release", {"bench_id": bench_id}, timeout_s)
    return profiles


def paired_shares(
    parts: dict[str, list[float]], totals: list[float]
) -> tuple[Interval | None, dict[str, Interval | None], Callable[[Sequence[str]], Interval | None]]:
    """The total delta and each part's share of it, with t intervals over the repeat pairs
    (``parts[name][i]`` and ``totals[i]`` are pair ``i``'s deltas; ``shares`` says why t);
    the third value gives the share of the total the named parts leave over. None where a
    share cannot be told (the pairs do not tell the total apart from zero)."""

    def left_over(names: Sequence[str]) -> Interval | None:
        rest = [total - sum(parts[n][i] for n in names) for i, total in enumerate(totals)]
        return shares.ratio(rest, totals)

    return (
        shares.mean(totals),
        {name: shares.ratio(deltas, totals) for name, deltas in parts.items()},
        left_over,
    )


@dataclass(frozen=True)
class OpChange:
    """One op (or kernel) whose use or time changed, matched by name across the sides.

    ``change``: added, removed, called-more, called-less, slower, faster; ``calls`` and
    ``seconds`` are per benchmark call (means over the repeats), baseline then candidate;
    ``share`` the fraction of the wall-time delta it accounts for, with its interval
    (None: not computable, the delta being zero).
    """

    view: str  # "ops" or "kernels"
    name: str
    change: str
    calls: tuple[float, float]
    seconds: tuple[float, float]
    share: Interval | None

    def to_json(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "name": self.name,
            "change": self.change,
            "calls": list(self.calls),
            "seconds": list(self.seconds),
            "share": shares.listed(self.share),
        }


@dataclass(frozen=True)
class ViewDiff:
    """One view (ops, or kernels) of the profiles, diffed and attributed."""

    view: str
    changes: tuple[OpChange, ...]  # every changed op, largest share first
    causes: tuple[OpChange, ...]  # the few that account for the delta
    unexplained: Interval | None  # what the causes leave of the delta
    outside: Interval | None  # what no op at all accounts for (time no op was seen in)


def told_apart(share: Interval | None) -> bool:
    """Whether a share's interval excludes 0: a change the repeats' noise does not explain."""
    return share is not None and (share[1] > 0 or share[2] < 0)


def size(share: Interval | None) -> float:
    return abs(share[0]) if share is not None else 0.0


def _mean_field(profiles: list[dict[str, Any]], view: str, name: str, field: str) -> float:
    return sum(float(p[view].get(name, {}).get(field, 0.0)) for p in profiles) / len(profiles)


def _change(
    before: tuple[float, float], after: tuple[float, float], share: Interval | None
) -> str | None:
    (calls_before, seconds_before), (calls_after, seconds_after) = before, after
    if calls_before == 0 and calls_after > 0:
        return "added"
    if calls_after == 0 and calls_before > 0:
        return "removed"
    if abs(calls_after - calls_before) > _CALLS_TOLERANCE * max(calls_before, calls_after):
        return "called-more" if calls_after > calls_before else "called-less"
    if told_apart(share):
        return "slower" if seconds_after > seconds_before else "faster"
    return None


def diff_view(
    view: str, baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]
) -> ViewDiff:
    """Match one view's names across the sides and attribute the wall-time delta."""
    names = sorted({n for p in [*baseline, *candidate] for n in p[view]})
    deltas = {
        n: [
            float(c[view].get(n, {}).get("s", 0.0)) - float(b[view].get(n, {}).get("s", 0.0))
            for b, c in zip(baseline, candidate, strict=True)
        ]
        for n in names
    }
    totals = [
        float(c["wall_s"]) - float(b["wall_s"]) for b, c in zip(baseline, candidate, strict=True)
    ]
    _total, op_shares, left_over = paired_shares(deltas, totals)
    changes = []
    for name in names:
        before = (
            _mean_field(baseline, view, name, "calls"),
            _mean_field(baseline, view, name, "s"),
        )
        after = (
            _mean_field(candidate, view, name, "calls"),
            _mean_field(candidate, view, name, "s"),
        )
        change = _change(before, after, op_shares[name])
        if change:
            calls, seconds = (before[0], after[0]), (before[1], after[1])
            changes.append(OpChange(view, name, change, calls, seconds, op_shares[name]))
    changes.sort(key=lambda c: -size(c.share))
    causes = tuple(c for c in changes if size(c.share) >= MIN_SHARE and told_apart(c.share))
    causes = causes[:MAX_CAUSES]
    return ViewDiff(
        view=view,
        changes=tuple(changes),
        causes=causes,
        unexplained=left_over([c.name for c in causes]),
        outside=left_over(names),
    )


@dataclass(frozen=True)
class OpsDiff:
    """The op and kernel diff of one benchmark, with the wall-time delta it explains."""

    delta_s: Interval | None  # candidate minus baseline wall seconds per call, profiled
    wall_s: tuple[float, float]  # mean wall seconds per call, baseline then candidate
    ops: ViewDiff
    kernels: ViewDiff | None  # None: not checked (``kernels_not_checked`` says why)
    kernels_not_checked: str
    dispatch: dict[str, Any] | None  # the bench's dispatch diff of this benchmark, linked

    def to_json(self) -> dict[str, Any]:
        return {
            "delta_s": shares.listed(self.delta_s),
            "wall_s": list(self.wall_s),
            **{
                view.view: {
                    "changes": [c.to_json() for c in view.changes],
                    "causes": [c.name for c in view.causes],
                    "unexplained": shares.listed(view.unexplained),
                    "outside_ops": shares.listed(view.outside),
                }
                for view in (self.ops, self.kernels)
                if view is not None
            },
            "kernels_not_checked": self.kernels_not_checked,
            "dispatch_diff": self.dispatch,
        }


def diff_profiles(
    baseline: list[dict[str, Any]],
    candidate: list[dict[str, Any]],
    dispatch: dict[str, Any] | None = None,
) -> OpsDiff:
    """Both sides' repeated profiles (paired by position) diffed op by op and kernel by
    kernel; ``dispatch`` is the bench's own dispatch diff, carried along as its link."""
    if not baseline or len(baseline) != len(candidate):
        raise ValueError(
            f"needs the same number of profiles per side, got {len(baseline)} and "
            f"{len(candidate)}; profile both sides the same number of times"
        )
    wall = tuple(
        sum(float(p["wall_s"]) for p in side) / len(side) for side in (baseline, candidate)
    )
    totals = [
        float(c["wall_s"]) - float(b["wall_s"]) for b, c in zip(baseline, candidate, strict=True)
    ]
    delta, _, _ = paired_shares({}, totals)
    no_kernels = next(
        (
            str(p.get("kernels_not_checked"))
            for p in [*baseline, *candidate]
            if p.get("kernels_not_checked")
        ),
        "",
    )
    return OpsDiff(
        delta_s=delta,
        wall_s=(wall[0], wall[1]),
        ops=diff_view("ops", baseline, candidate),
        kernels=None if no_kernels else diff_view("kernels", baseline, candidate),
        kernels_not_checked=no_kernels,
        dispatch=dispatch,
    )


def dispatch_note(change: OpChange, dispatch: dict[str, Any] | None) -> str:
    """What the bench's own dispatch diff (``bench/dispatch_diff.py``) says of this op or
    kernel, as the link between the two: "" where it names it nowhere."""
    view = ((dispatch or {}).get("changes") or {}).get(change.view) or {}
    if change.name in view.get("only_candidate", ()):
        return "; the bench's dispatch diff has it only in the candidate too"
    if change.name in view.get("only_baseline", ()):
        return "; the bench's dispatch diff has it only in the baseline too"
    counts = (view.get("count_changed") or {}).get(change.name)
    if counts:
        return f"; the bench's dispatch diff counts {counts[0]:g} -> {counts[1]:g} per call"
    return ""


def _evidence(change: OpChange, repeats: int, dispatch: dict[str, Any] | None) -> str:
    unit = "device" if change.view == "kernels" else "self CPU"
    (calls_before, calls_after), (before, after) = change.calls, change.seconds
    return (
        f"{change.change}: {calls_before:g} -> {calls_after:g} calls and {before * 1e3:.4g} -> "
        f"{after * 1e3:.4g} ms {unit} time per benchmark call "
        f"(torch.profiler, {repeats} profiled repeats per side, apart from the A/B samples)"
        + dispatch_note(change, dispatch)
    )


def no_change(delta: Interval | None) -> bool:
    """Whether the delta's interval holds 0: the profiled runs show no change to share."""
    return delta is None or delta[1] <= 0 <= delta[2]


def contribution(diff: OpsDiff, repeats: int, reproduce: str) -> Contribution:
    """The diff as the explain section's causes: the ops (and kernels) that account for
    the delta, the unexplained share of the view that explains most, what was not checked."""
    views = [view for view in (diff.ops, diff.kernels) if view is not None]
    not_checked = [diff.kernels_not_checked] if diff.kernels_not_checked else []
    extra: dict[str, Any] = {"ops": diff.to_json()}
    if diff.delta_s is None or no_change(diff.delta_s):
        estimate, low, high = diff.delta_s or (0.0, 0.0, 0.0)
        not_checked.append(
            f"ops: the profiled runs show no change to share out (delta {estimate * 1e6:+.3g} us "
            f"per call, interval {low * 1e6:+.3g} to {high * 1e6:+.3g} us)"
        )
        return Contribution(not_checked=tuple(not_checked), extra=extra)
    by_view = {
        view.view: [
            Cause(
                kind="kernel" if change.view == "kernels" else "op",
                name=change.name,
                share=change.share[0],
                share_low=change.share[1],
                share_high=change.share[2],
                evidence=_evidence(change, repeats, diff.dispatch),
                reproduce=reproduce,
                detail={"dispatch_diff": diff.dispatch} if diff.dispatch else {},
            )
            for change in view.causes
            if change.share is not None
        ]
        for view in views
    }
    # The ops are the decomposition; the kernels they launch are the same time seen
    # another way, so they are detail, never shares beside the ops.
    kernels = [view_of("by kernels", by_view["kernels"])] if by_view.get("kernels") else []
    causes = (*by_view["ops"], *kernels)
    return Contribution(causes, diff.ops.unexplained, tuple(not_checked), extra)


def applies(finding: Finding) -> bool:
    """A moved steady benchmark (the bench's finding, its spec in ``facts``)."""
    spec = finding.facts.get("spec")
    return finding.kind == "timing" and isinstance(spec, dict) and spec.get("kind") in STEADY_KINDS


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    """Profile the benchmark again on both sides and diff it op by op. Reads from the
    finding's ``facts``: ``spec`` (as the bench ran it, with its ``id``), optionally
    ``threads`` and ``dispatch_diff`` (the bench's own diff of what ran: the link)."""
    spec = dict(finding.facts["spec"])
    bench_id = str(spec.get("id") or finding.item)
    threads = int(finding.facts.get("threads") or 1)
    repeats = job.settings.rounds
    timeout_s = job.call_timeout_s()
    with both_sides(job, lambda _role: thread_env(threads)) as workers:
        profiles = profile_sides(
            workers, bench_id, spec, repeats, threads, timeout_s, job.seconds_left
        )
    if len(profiles["baseline"]) < MIN_REPEATS:
        return Contribution(
            not_checked=(
                f"ops: not explained: the budget held {len(profiles['baseline'])} profiled "
                f"repeat(s) per side, {MIN_REPEATS} are the fewest shares are drawn from",
            )
        )
    diff = diff_profiles(
        profiles["baseline"], profiles["candidate"], finding.facts.get("dispatch_diff")
    )
    reproduce = f"torchcanary run --only bench,explain --explain full  # profiles {bench_id}"
    done = len(profiles["baseline"])
    found = contribution(diff, done, reproduce)
    if done < repeats:
        spent = f"ops: {done} of {repeats} profiled repeats per side (explain budget spent)"
        return replace(found, not_checked=(*found.not_checked, spent))
    return found


EXPLAINER: Explainer = FunctionExplainer("ops", applies, explain)
