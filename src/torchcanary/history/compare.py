"""Two runs side by side: the items whose verdicts changed, the measured ones that moved.

Each section hands its part through the section contract (``compared``: its items'
verdicts in a run, and for a measured item its ratio interval); a section without one is
not compared.

Fleet runs are compared profile by profile: a result on one hardware profile is only ever
set against the same profile's result in the other run. A profile that only one of the two
runs has (a run on one machine has the one profile '') is named as such, not compared.

A measured item (a benchmark) moved when its verdict changed or when the two runs'
intervals for the ratio (candidate/baseline) do not overlap: each run's interval already
carries that run's noise, so disjoint intervals are a change the runs' own measurements can
stand behind.

A change is for the worse when its section declares the new verdict a worse one
(``worse_verdicts``) and the old one was not: an improvement, or a verdict that stayed as
bad while its interval moved, is a change but not a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torchcanary.report.view import load_run_view
from torchcanary.section_types import RunView
from torchcanary.sections import registered
from torchcanary.store.base import ResultStore


@dataclass(frozen=True)
class RunItemChange:
    """One item whose result differs between run A and run B."""

    section: str
    item: str
    before: str
    after: str
    detail: str = ""
    profile: str = ""  # the fleet hardware profile it was found on ('' for one machine)


@dataclass(frozen=True)
class RunComparison:
    run_a: str
    run_b: str
    decision_a: str
    decision_b: str
    changes: list[RunItemChange]
    unchanged: int


def compare_runs(store: ResultStore, run_a: str, run_b: str) -> RunComparison:
    view_a, view_b = load_run_view(store, run_a), load_run_view(store, run_b)
    scopes_a, scopes_b = _by_profile(view_a), _by_profile(view_b)
    changes: list[RunItemChange] = []
    unchanged = 0
    for profile in sorted(set(scopes_a) | set(scopes_b)):
        if profile not in scopes_a or profile not in scopes_b:
            in_a = profile in scopes_a
            changes.append(_lone_profile(profile, in_a, run_a if in_a else run_b))
            continue
        found, same = _compare_views(scopes_a[profile], scopes_b[profile], profile)
        changes += found
        unchanged += same
    return RunComparison(
        run_a,
        run_b,
        view_a.run.decision or view_a.run.status,
        view_b.run.decision or view_b.run.status,
        changes,
        unchanged,
    )


def _by_profile(view: RunView) -> dict[str, RunView]:
    """Each hardware profile's own view of a fleet run; the run itself ('') otherwise."""
    return dict(view.profiles) if view.profiles else {"": view}


def _lone_profile(profile: str, in_a: bool, run_id: str) -> RunItemChange:
    """A profile only one run has: said, not compared."""
    name = profile or "'' (this machine: a run without --fleet)"
    before, after = ("results", "absent") if in_a else ("absent", "results")
    detail = f"only run {run_id} has results on this profile; not compared"
    return RunItemChange("fleet", f"profile {name}", before, after, detail, profile)


def _compare_views(
    view_a: RunView, view_b: RunView, profile: str
) -> tuple[list[RunItemChange], int]:
    changes: list[RunItemChange] = []
    unchanged = 0
    for name, section in registered().items():
        results_a, results_b = section.compared(view_a), section.compared(view_b)
        if results_a is None or results_b is None:
            continue  # a section that says nothing to compare
        for item in sorted(set(results_a) | set(results_b)):
            change = _change(name, item, results_a.get(item), results_b.get(item))
            if change is None:
                unchanged += 1
            else:
                changes.append(replace(change, profile=profile))
    return changes, unchanged


def for_the_worse(change: RunItemChange) -> bool:
    """Whether ``change`` is a regression: to a verdict its section counts as worse, from
    one it does not."""
    section = registered().get(change.section)
    worse = section.worse_verdicts if section is not None else frozenset()
    return change.after in worse and change.before not in worse


def interval_text(result: dict[str, Any] | None) -> str:
    if not result or result.get("ratio") is None:
        return "–"
    return f"{result['ratio']:.3f} [{result['ci_low']:.3f}, {result['ci_high']:.3f}]"


def _disjoint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if None in (a.get("ci_low"), a.get("ci_high"), b.get("ci_low"), b.get("ci_high")):
        return False
    return bool(a["ci_high"] < b["ci_low"] or b["ci_high"] < a["ci_low"])


def _change(
    section: str, item: str, a: dict[str, Any] | None, b: dict[str, Any] | None
) -> RunItemChange | None:
    before = a["verdict"] if a else "absent"
    after = b["verdict"] if b else "absent"
    if "ratio" not in (a or b or {}):  # an item with no interval: its verdict is all
        return None if before == after else RunItemChange(section, item, before, after)
    moved = a is not None and b is not None and _disjoint(a, b)
    if before == after and not moved:
        return None
    detail = f"ratio {interval_text(a)} -> {interval_text(b)}"
    if moved:
        detail += " (intervals do not overlap)"
    return RunItemChange(section, item, before, after, detail)
