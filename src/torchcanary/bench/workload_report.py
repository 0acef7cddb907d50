"""How a user's workload's own facts read in the reports: compile, memory, numerics.

Shared by the HTML details and the Markdown summary so both say the same thing.
"""

from __future__ import annotations

from typing import Any

from torchcanary.worker.bench.specs import human_bytes


def _pair(facts: dict[str, Any], key: str, show: Any) -> str | None:
    before = (facts.get("baseline") or {}).get(key)
    after = (facts.get("candidate") or {}).get(key)
    if before in (None, []) and after in (None, []):
        return None
    return f"{show(before)} -> {show(after)}"


def _seconds(value: Any) -> str:
    return "–" if value is None else f"{value:.3g} s"


def _counts(value: Any) -> str:
    return "–" if not value else "/".join(str(v) for v in value)


def _memory(value: Any) -> str:
    return "–" if not value else human_bytes(float(value))


def fact_lines(payload: dict[str, Any]) -> list[str]:
    """Baseline -> candidate for each fact the workload reported, then its numerics."""
    facts = payload.get("workload") or {}
    lines = []
    for label, key, show in (
        ("setup", "setup_s", _seconds),
        ("cold compile", "cold_compile_s", _seconds),
        ("graphs", "graphs", _counts),
        ("graph breaks", "graph_breaks", _counts),
        ("recompiles after the first call", "recompiles", _counts),
        ("peak memory", "peak_memory_bytes", _memory),
    ):
        pair = _pair(facts, key, show)
        if pair is not None:
            lines.append(f"{label}: {pair}")
    reasons = sorted(
        {r for side in facts.values() for r in (side or {}).get("break_reasons") or []}
    )
    if reasons:
        lines.append("graph break reasons: " + "; ".join(reasons[:3]))
    how = next((s.get("peak_memory_how") for s in facts.values() if s), None)
    if how:
        lines.append(f"peak memory is the {how}")
    numerics = payload.get("numerics")
    if numerics:
        prefix = "outputs DIFFER: " if numerics["drift"] else "outputs: "
        lines.append(prefix + numerics["reason"])
    return lines


def summary_line(payload: dict[str, Any]) -> str:
    """One short line for the terminal: compile time, breaks, memory, numerics."""
    facts = payload.get("workload") or {}
    parts = []
    for label, key, show in (
        ("compile", "cold_compile_s", _seconds),
        ("breaks", "graph_breaks", _counts),
        ("peak", "peak_memory_bytes", _memory),
    ):
        pair = _pair(facts, key, show)
        if pair is not None:
            parts.append(f"{label} {pair}")
    numerics = payload.get("numerics")
    if numerics and numerics.get("compared"):
        parts.append("outputs differ" if numerics["drift"] else "outputs match")
    return ", ".join(parts)
