"""What of the stack's results deserves explaining (its part of the ``findings`` contract):
every test whose outcome changed, with both sides' failure texts for the explain section to
link to the changes they touch."""

from __future__ import annotations

from torchcanary.section_types import Finding, RunView
from torchcanary.stack.result import ChangeVerdict, StackChange, from_rows

SECTION = "stack"
_OUTCOME_CHANGES = (
    ChangeVerdict.NEWLY_ERRORING,
    ChangeVerdict.NEWLY_FAILING,
    ChangeVerdict.NEWLY_SKIPPED,
    ChangeVerdict.NEWLY_PASSING,
)


def _outcome(side: dict[str, object]) -> str:
    return str(side.get("outcome") or "-")


def _text(side: dict[str, object]) -> str:
    """A side's failure text: its message and its traceback (rows stored before the
    traceback was kept have the message only)."""
    return "\n".join(str(side.get(key) or "") for key in ("message", "traceback")).strip()


def findings(view: RunView) -> list[Finding]:
    """Every key whose outcome changed between the environments."""
    return [
        Finding(
            section=SECTION,
            item=record.key,
            kind="outcome",
            delta=f"{_outcome(record.baseline)} -> {_outcome(record.candidate)}",
            facts={
                "baseline_text": _text(record.baseline),
                "candidate_text": _text(record.candidate),
                "first_differing_lines": record.first_differing_lines,
            },
        )
        for record in from_rows(view.sections.get(SECTION, []))
        if isinstance(record, StackChange) and record.verdict in _OUTCOME_CHANGES
    ]
