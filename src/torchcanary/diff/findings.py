"""What of the diff's results other findings may be explained by (its part of the
``findings`` contract): each changed default, removed name and changed signature, as a
finding of kind ``change`` with where the user's code meets it (file:line). The explain
section reads these as candidate causes (a flipped config default to set back, an API a
failing test's traceback touches), not as findings to explain themselves."""

from __future__ import annotations

from torchcanary.diff.changes import ChangeKind
from torchcanary.diff.result import DiffChange, from_rows
from torchcanary.section_types import Finding, RunView

SECTION = "diff"
_CAUSAL_KINDS = (
    ChangeKind.DEFAULT_CHANGED,
    ChangeKind.CONFIG_REMOVED,
    ChangeKind.API_REMOVED,
    ChangeKind.SIGNATURE_CHANGED,
    ChangeKind.ENV_VAR_REMOVED,
)


def findings(view: RunView) -> list[Finding]:
    """Every change that can make the same code behave or run differently."""
    return [
        Finding(
            section=SECTION,
            item=record.key,
            kind="change",
            delta=f"{record.verdict}: {record.baseline!r} -> {record.candidate!r}",
            facts={
                "change": record.verdict.value,
                "symbol": record.symbol,
                "baseline": record.baseline,
                "candidate": record.candidate,
                "hits": list(record.hits),
                "in_use": record.in_use,
            },
        )
        for record in from_rows(view.sections.get(SECTION, []))
        if isinstance(record, DiffChange) and record.verdict in _CAUSAL_KINDS
    ]
