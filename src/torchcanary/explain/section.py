"""The explain section's run: every other section's findings of this run, explained.

It runs after every other section (``order`` 90), reads their results of this run from
the store, asks each section for its findings through the contract (``findings``), and
hands each finding to the explainers that apply (``explainers.py``), within a budget: at
most ``budget_fraction`` of the time this invocation of the run took before it (a resumed
run counts its own time, not the hours since it was created); ``--explain full`` has no
cap. No measuring round starts that would end past the budget. It never blocks a run by
itself: it explains, the other sections decide.

Policy keys: none (an explanation never blocks a run).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torchcanary.context import RunContext
from torchcanary.explain import shares
from torchcanary.explain.cause import (
    SECTION,
    Cause,
    ExplainStatus,
    ExplainSummary,
    Explanation,
    view_of,
)
from torchcanary.explain.confounds import CONFOUND
from torchcanary.explain.explainers import EXPLAINERS
from torchcanary.explain.job import Contribution, ExplainJob
from torchcanary.explain.settings import ExplainSettings
from torchcanary.explain.settings import parse_settings as _parse
from torchcanary.plan import RunPlan
from torchcanary.section_types import Finding, PlannedUnit, RunView
from torchcanary.store.rows import SUMMARY_KEY, SectionResult

POLICY_DEFAULTS: dict[str, Any] = {}
# The section's one planned unit is its pass over the run's findings: checked when its
# summary row says it went through them (``done``, whatever each explanation found).
CHECKED_VERDICTS = frozenset({ExplainStatus.DONE.value})
CHANGE = "change"  # a finding that is a candidate cause of others (the diff's changes)


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return _parse(mapping)


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """One unit: going through the findings of the run's other sections (which findings
    there are is known only once they ran)."""
    return [PlannedUnit(SUMMARY_KEY, ExplainSummary.env_role)]


def blocking_reasons(view: RunView, policy: Mapping[str, Any]) -> list[str]:
    """None: an explanation says why, the section that found the change decides."""
    return []


def _budget_s(ctx: RunContext, settings: ExplainSettings) -> float | None:
    """``budget_fraction`` of the time this invocation has taken so far (its environments,
    its sections); None in ``full`` mode: no cap."""
    if settings.mode == "full":
        return None
    return max(0.0, (time.monotonic() - ctx.started) * settings.budget_fraction)


def run(ctx: RunContext) -> None:
    settings = ExplainSettings.from_json(ctx.plan.section_settings(SECTION))
    clock = time.monotonic()
    if settings.mode == "off":
        ctx.progress.note("explain: off (--explain off)")
        summary = ExplainSummary(mode="off")
        ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, summary))
        return
    done = (
        {key for key, _ in ctx.store.done_section_keys(ctx.run_id, SECTION)}
        if ctx.resume
        else set()
    )
    if SUMMARY_KEY in done:
        return  # a resumed run that had explained everything already
    if ctx.run_so_far is None:
        raise RuntimeError("the explain section was not handed the run so far (ctx.run_so_far)")
    view, found = ctx.run_so_far()
    changes = [finding for finding in found if finding.kind == CHANGE]
    pending = [
        finding
        for finding in found
        if finding.kind != CHANGE and f"{finding.section}:{finding.item}" not in done
    ]
    budget = _budget_s(ctx, settings)
    deadline = math.inf if budget is None else time.monotonic() + budget
    job = ExplainJob(ctx, view, settings, deadline, changes)
    cap = "no budget cap" if budget is None else f"budget {budget:.0f} s"
    ctx.progress.note(f"explain: {len(pending)} finding(s), {cap}")
    for finding in pending:
        explanation = explain_one(job, finding)
        ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, explanation))
    summary = ExplainSummary(
        mode=settings.mode,
        findings=len(pending),
        budget_s=None if budget is None else round(budget, 1),
        seconds=round(time.monotonic() - clock, 1),
    )
    ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, summary))


def explain_one(job: ExplainJob, finding: Finding) -> Explanation:
    """One finding through every explainer that applies, while the budget lasts."""
    clock = time.monotonic()
    contributions: list[Contribution] = []
    not_checked: list[str] = []
    applying = [e for e in EXPLAINERS if e.applies(finding)]
    if not applying:
        not_checked.append("no explainer measures this kind of finding")
    for explainer in applying:
        if explainer.measures and job.seconds_left() <= 0:
            not_checked.append(f"{explainer.name}: not explained: budget spent")
            continue
        try:
            contributions.append(explainer.explain(job, finding))
        except Exception as exc:  # one broken explainer must not lose the others' answers
            not_checked.append(f"{explainer.name}: failed: {type(exc).__name__}: {exc}"[:300])
    return combine(finding, contributions, not_checked, time.monotonic() - clock)


def combine(
    finding: Finding, contributions: list[Contribution], not_checked: list[str], seconds: float
) -> Explanation:
    """One explanation from the explainers' contributions: one decomposition of the change
    (see :func:`_one_decomposition`); the unexplained share is never spread over the causes.
    """
    causes, unexplained = _one_decomposition(contributions)
    not_checked += [reason for part in contributions for reason in part.not_checked]
    extra: dict[str, Any] = {}
    for part in contributions:
        extra.update(part.extra)
    return Explanation(
        key=f"{finding.section}:{finding.item}",
        verdict=status_of(causes, unexplained),
        section=finding.section,
        item=finding.item,
        delta=finding.delta,
        causes=tuple(sorted(_linked(causes), key=_rank)),
        unexplained=unexplained[0] if unexplained else None,
        unexplained_low=unexplained[1] if unexplained else None,
        unexplained_high=unexplained[2] if unexplained else None,
        seconds=round(seconds, 3),
        not_checked=tuple(not_checked),
        extra=extra,
    )


def _one_decomposition(
    contributions: list[Contribution],
) -> tuple[list[Cause], tuple[float, float, float] | None]:
    """The parts of the explainer that leaves the least unexplained, with its unexplained
    share (together they add up to the change); every other explainer's shares become
    detail of one "view" cause each (they measure the same change another way, so they
    overlap those parts); causes without a share (links, untested candidates) stay."""
    measured = [(part.unexplained, part) for part in contributions if part.unexplained]
    if not measured:
        return [c for part in contributions for c in part.causes], None
    unexplained, primary = min(measured, key=lambda pair: pair[0][0])
    causes = list(primary.causes)
    for part in contributions:
        if part is primary:
            continue
        causes += [c for c in part.causes if c.share is None]
        shared = [c for c in part.causes if c.share is not None]
        if shared:
            kinds = ", ".join(sorted({c.kind for c in shared}))
            causes.append(view_of(f"by {kinds}", shared))
    return causes, unexplained


def _linked(causes: list[Cause]) -> list[Cause]:
    """The untested confounds that move CPU kernels, linked to the ops they would explain."""
    ops = [c.name for c in causes if c.kind in ("op", "kernel")]
    if not ops:
        return causes
    return [
        replace(
            c,
            evidence=f"{c.evidence}; it changes how fast every CPU kernel runs, the "
            f"ones named here included: {', '.join(ops[:4])}",
        )
        if c.kind == CONFOUND and c.detail.get("kernels")
        else c
        for c in causes
    ]


def _rank(cause: Cause) -> tuple[int, int, float]:
    """A setting shown to recover a material share first, then the untested confounds
    (the run names them; an op's share says what moved, not why), then the rest in the
    order their explainer ranked them (``detail["rank"]``: parts a near tie leaves in a
    fixed order), else by share."""
    if cause.kind == CONFOUND:
        return (1, 0, 0.0)
    tried = cause.kind in ("setting", "settings") and (cause.share_low or 0.0) > shares.MATERIAL
    return (0 if tried else 2, int(cause.detail.get("rank", 0)), -(cause.share or 0.0))


EXPLAINED_WIDTH = 0.5  # an unexplained share's interval wider than this cannot show "explained"


def status_of(causes: list[Cause], unexplained: tuple[float, float, float] | None) -> ExplainStatus:
    """Explained when the unexplained share's interval holds 0 and is tight; partly when a
    material share is accounted for: one cause's interval lies above ``shares.MATERIAL``
    (with several candidate causes, one interval clearing 0 by chance is common), or the
    causes together leave less than all but a material share (the unexplained interval
    lies below ``1 - MATERIAL``: a split into parts that each hold some of the change
    accounts for it together, whichever part one run's noise favours); unexplained
    otherwise. Each is decided on an interval, never on an estimate."""
    if unexplained is None:
        return ExplainStatus.PARTLY if causes else ExplainStatus.NOT_CHECKED
    _, low, high = unexplained
    if (low <= 0.0 <= high or high < 0.0) and high - low <= EXPLAINED_WIDTH:
        return ExplainStatus.EXPLAINED
    jointly = high < 1.0 - shares.MATERIAL
    if not jointly and not any((c.share_low or 0.0) > shares.MATERIAL for c in causes):
        return ExplainStatus.UNEXPLAINED
    return ExplainStatus.PARTLY
