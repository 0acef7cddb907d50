"""The explain section in ``torchcanary compare``: each finding's explanation verdict and
its leading cause, so two runs show whether the same cause still explains the same item."""

from __future__ import annotations

from typing import Any

from torchcanary.explain.cause import SECTION
from torchcanary.explain.result import from_rows
from torchcanary.section_types import RunView


def compared(view: RunView) -> dict[str, dict[str, Any]]:
    """Each explained finding's verdict, with its leading cause and that cause's share."""
    found = {}
    for explanation in from_rows(view.sections.get(SECTION, []))[1]:
        entry: dict[str, Any] = {"verdict": str(explanation.verdict)}
        if explanation.causes:
            lead = explanation.causes[0]
            entry["cause"] = f"{lead.kind} {lead.name}"
            entry["share"] = lead.share
        found[explanation.key] = entry
    return found
