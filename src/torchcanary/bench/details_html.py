"""Parts of a benchmark's details in the HTML report: titled lists, what was kept from
earlier runs of the same environment, and what ran differently (the dispatch profiles).
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.bench.kept_facts import REUSED
from torchcanary.bench.result import BenchMeasured
from torchcanary.kept import describe_age


def list_html(title: str, items: list[str]) -> str:
    """A titled list, or nothing when there is nothing to list."""
    if not items:
        return ""
    return (
        f"<h5>{escape(title)}</h5><ul>"
        + "".join(f"<li>{escape(str(item))}</li>" for item in items)
        + "</ul>"
    )


def kept_note(facts: dict[str, Any], made_before: float, what: str) -> str:
    """`` (<what> kept from earlier runs of the same environment: the baseline's from run X,
    3 h before this run)``, or nothing when every side found its own."""
    reused = {
        role: found[REUSED]
        for role, found in facts.items()
        if isinstance(found, dict) and isinstance(found.get(REUSED), dict)
    }
    if not reused:
        return ""
    parts = [
        f"the {role}'s from run {origin.get('run_id')}, "
        f"{describe_age(max(made_before - float(origin.get('made_at', made_before)), 0.0))} "
        "before this run"
        for role, origin in sorted(reused.items())
    ]
    return f" ({what} kept from earlier runs of the same environment: {'; '.join(parts)})"


def dispatch_html(result: BenchMeasured, run_created_at: float) -> str:
    """What ran differently between the versions: operators, kernels, library calls."""
    dispatch_diff = result.dispatch_diff
    if not dispatch_diff:
        return ""
    if "error" in dispatch_diff:
        return f"<p>What ran: not recorded ({escape(str(dispatch_diff['error']))})</p>"
    kept = kept_note(result.dispatch or {}, run_created_at, "profiles")
    if not dispatch_diff["changed"]:
        return (
            f"<p>What ran: the same operators, kernels and library calls in both{escape(kept)}.</p>"
        )
    items = []
    for view_name, change in dispatch_diff["changes"].items():
        for name in change["only_baseline"]:
            items.append(f"{view_name}: only baseline ran {name}")
        for name in change["only_candidate"]:
            items.append(f"{view_name}: only candidate ran {name}")
        for name, (before, after) in change["count_changed"].items():
            items.append(f"{view_name}: {name} {before:g} -> {after:g} per call")
    return list_html(f"What ran differently{kept}", items)
