"""What ran differently: the operator, kernel and library-call sets of two environments."""

from __future__ import annotations

from typing import Any

_VIEWS = ("ops", "kernels", "library_calls")


def diff(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """Per view: names only one side ran, and names whose count per call changed."""
    if "error" in baseline or "error" in candidate:
        return {"error": baseline.get("error") or candidate.get("error")}
    changes: dict[str, Any] = {}
    for view in _VIEWS:
        before, after = baseline.get(view) or {}, candidate.get(view) or {}
        only_before = sorted(set(before) - set(after))
        only_after = sorted(set(after) - set(before))
        counts = {
            name: [before[name], after[name]]
            for name in sorted(set(before) & set(after))
            if before[name] != after[name]
        }
        if only_before or only_after or counts:
            changes[view] = {
                "only_baseline": only_before,
                "only_candidate": only_after,
                "count_changed": counts,
            }
    return {"changed": bool(changes), "changes": changes}
