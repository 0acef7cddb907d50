"""The core's books: which units a section planned ended without a checked verdict.

A section declares, from the plan alone, the units it will run (``planned_units``) and the
verdicts that say a unit was checked (``checked_verdicts``). What it stored is read back
as units (``sections.stored_units``). A planned unit with no stored verdict (a worker that
crashed before storing, a hang, an environment missing, the section's own code raising),
or whose verdict is not a checked one (an error, a timeout, nothing recorded), was not
checked: the decision reads this list, never a section's own opinion of whether it did
enough (``policy.decide``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import astuple, dataclass

from torchcanary.plan import RunPlan
from torchcanary.section_types import PlannedUnit, RunView
from torchcanary.sections import Section, get_section, stored_units

NO_VERDICT = "no verdict stored"  # what a planned unit without a row is said to have
# The run's declaration, stored before any section runs: what the decision is held to,
# even where the catalog of probes or benchmarks has changed since (a resumed run, a
# report decided again later).
PLANNED_ARTIFACT = "planned-units.json"


@dataclass(frozen=True)
class UncheckedUnit:
    """One planned unit that ended without a checked verdict, and what it ended with."""

    unit: PlannedUnit
    verdict: str
    why: str = ""

    def describe(self) -> str:
        first_line = (self.why.strip().splitlines() or [""])[0][:160]
        said = f": {first_line}" if first_line else ""
        return f"{self.unit.describe()} {self.verdict}{said}"


def plan_units(plan: RunPlan) -> dict[str, list[PlannedUnit]]:
    """Every section's planned units in ``plan``, by section. A section whose plan cannot
    be read is left out: the decision asks it again and objects with why."""
    planned = {}
    for name in plan.sections:
        try:
            planned[name] = list(get_section(name).planned_units(plan))
        except Exception:  # its own code broke; decide() says so, naming the error
            continue
    return planned


def declaration(planned: Mapping[str, list[PlannedUnit]]) -> bytes:
    """``planned`` as the run stores it before it starts (``PLANNED_ARTIFACT``)."""
    data = {name: [list(astuple(unit)) for unit in units] for name, units in planned.items()}
    return json.dumps(data, sort_keys=True).encode()


def declared_units(content: bytes) -> dict[str, list[PlannedUnit]]:
    """A stored declaration read back (``declaration``)."""
    data: Mapping[str, list[list[object]]] = json.loads(content)
    return {
        name: [PlannedUnit(str(item), str(role), int(str(trial))) for item, role, trial in units]
        for name, units in data.items()
    }


def unchecked_units(
    section: Section, planned: list[PlannedUnit], view: RunView
) -> list[UncheckedUnit]:
    """Of ``section``'s ``planned`` units, those ``view`` holds no checked verdict for, in
    plan order."""
    checked = section.checked_verdicts
    stored = {outcome.unit: outcome for outcome in stored_units(section, view)}
    unchecked = []
    for unit in dict.fromkeys(planned):
        outcome = stored.get(unit)
        if outcome is None:
            unchecked.append(UncheckedUnit(unit, NO_VERDICT))
        elif outcome.verdict not in checked:
            unchecked.append(UncheckedUnit(unit, outcome.verdict or "empty verdict", outcome.why))
    return unchecked
