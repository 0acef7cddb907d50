"""A fleet run's ledger: one row per profile and section saying how its unit ended, read
by the fleet reports and by a section's own fleet part (the claims' matrix)."""

from __future__ import annotations

from torchcanary.section_types import RunView

LEDGER_SECTION = "fleet"  # a fleet run's units, one row per profile and section: how each ended
# A ledger row's verdict for a unit that ran nothing: it saw fewer GPUs than its profile has.
NOT_CHECKED = "not checked"


def not_asked(view: RunView) -> dict[str, dict[str, str]]:
    """Per profile, the claims its hardware could not answer (never sent), and why."""
    return {
        profile: {
            str(pid): str(why)
            for r in pview.sections.get(LEDGER_SECTION, [])
            for pid, why in (r.payload.get("not_asked") or {}).items()
        }
        for profile, pview in view.profiles.items()
    }


def not_checked(view: RunView, section: str) -> dict[str, str]:
    """Per profile whose unit of ``section`` ran nothing because it saw too few GPUs, why
    (``not checked: the unit saw S of N GPUs (...)``)."""
    return {
        profile: str(r.payload.get("error") or "not checked")
        for profile, pview in view.profiles.items()
        for r in pview.sections.get(LEDGER_SECTION, [])
        if r.key == section and r.verdict == NOT_CHECKED
    }
