"""The stack's part of ``torchcanary repro``: each test that now fails, errors or is
skipped, with the command and folder the run used, each side's outcome and message (and the
failing test's traceback where the run kept one), and the interpreters the suite ran under
(its overlays, with the project and pytest installed)."""

from __future__ import annotations

from typing import Any

from torchcanary.section_types import Finding, RunView
from torchcanary.stack.result import ChangeVerdict, StackChange, StackRun, from_rows

SECTION = "stack"
KIND = "test"  # the repro writer that reads these findings
_SHOWN = (ChangeVerdict.NEWLY_FAILING, ChangeVerdict.NEWLY_ERRORING, ChangeVerdict.NEWLY_SKIPPED)


def _side(side: dict[str, Any]) -> dict[str, str]:
    kept = {"outcome": str(side.get("outcome", "?")), "message": str(side.get("message", ""))}
    if side.get("traceback"):
        kept["traceback"] = str(side["traceback"])
    return kept


def reproducible(view: RunView) -> list[Finding]:
    """Every test (a pytest id, not the whole command or a numerics record) whose outcome
    got worse in the candidate."""
    records = from_rows(view.sections.get(SECTION, []))
    pythons = {r.env_role: r.argv[0] for r in records if isinstance(r, StackRun) and r.argv}
    settings = view.run.plan.get("settings", {}).get(SECTION, {})
    return [
        Finding(
            section=SECTION,
            item=record.key,
            kind=KIND,
            delta=record.detail,
            facts={
                "test": record.key,
                "cwd": str(settings.get("cwd", ".")),
                "env": dict(settings.get("env", {})),
                "installed": list(settings.get("with", [])),
                "pythons": pythons,
                "baseline": _side(record.baseline),
                "candidate": _side(record.candidate),
                "deterministic": record.deterministic,
            },
        )
        for record in records
        if isinstance(record, StackChange) and record.verdict in _SHOWN and "::" in record.key
    ]
