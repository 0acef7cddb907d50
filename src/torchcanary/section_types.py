"""The types the section contract speaks: the run view a section's report parts read,
the JUnit case and fleet part they hand back, the units a section plans and how each ended,
and the bounds of a numeric policy key.

They live below both ``sections.py`` and ``report/`` so that neither imports the other
(reading a view from the store, which needs the registry, is ``report/view.py``'s job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult


@dataclass(frozen=True)
class RunView:
    """Everything the outputs need about one run, read from the store once
    (``report.view.load_run_view``)."""

    run: RunRow
    environments: dict[str, EnvironmentRow]
    sections: dict[str, list[SectionResult]]
    # What each section loaded beside its rows (its ``load_view``), by section name.
    section_views: dict[str, Any] = field(default_factory=dict)
    # A fleet run: each hardware profile's own view (its results only), and the fleet's
    # record of the nodes chosen. Empty for a run on one machine.
    profiles: dict[str, RunView] = field(default_factory=dict)
    fleet: dict[str, Any] = field(default_factory=dict)
    # Each section's units as the run declared them before it started (None: a run stored
    # before units were declared; the decision then reads them from the plan).
    planned: dict[str, list[PlannedUnit]] | None = None
    # ``torchcanary repro``'s verified reproducers: "<section>:<item>" -> its folder,
    # relative to the run's output folder (only those that reproduce; ``repro/``).
    reproducers: dict[str, str] = field(default_factory=dict)

    def confounds(self) -> dict[str, tuple[Any, Any]]:
        """Build facts other than the version on which baseline and candidate differ."""
        if "baseline" not in self.environments or "candidate" not in self.environments:
            return {}
        return self.environments["baseline"].manifest.confounds_against(
            self.environments["candidate"].manifest
        )


@dataclass(frozen=True)
class JUnitCase:
    suite: str
    name: str
    status: str  # passed, failure, error, skipped
    time_s: float = 0.0
    message: str = ""
    text: str = ""
    output: str = ""  # the case's <system-out>, for a pass with something to say


@dataclass(frozen=True)
class FleetPart:
    """A section's own side-by-side of a fleet run's profiles, in place of the generic
    one (the claims: a claim x profile matrix, led by the claims that split).

    ``lead_*`` come before the decision's reasons and ``json`` goes into ``fleet`` after
    ``nodes``, whether or not the section ran; ``matrix_*`` only when it did.
    """

    lead_html: str = ""
    lead_markdown: tuple[str, ...] = ()
    matrix_html: str = ""
    matrix_markdown: tuple[str, ...] = ()
    json: dict[str, Any] = field(default_factory=dict)
    junit_cases: tuple[JUnitCase, ...] = ()
    terminal: tuple[Any, ...] = ()  # rich renderables for the summary printed after a run


@dataclass(frozen=True, order=True)
class PlannedUnit:
    """One piece of work a section plans from the run plan before it runs (a claim in one
    environment, a benchmark, one trial of a drill, a suite in one environment, ...).

    A stored row names its unit by its ``key`` and ``env_role``; ``trial`` numbers one of
    the repeated trials a row holds (from 1; 0: the row itself, read by the section's own
    ``stored_units``). The core (``accounting.py``) matches the plan against what ran.
    """

    item: str
    env_role: str
    trial: int = 0

    def describe(self) -> str:
        trial = f", trial {self.trial}" if self.trial else ""
        return f"{self.item} ({self.env_role}{trial})"


@dataclass(frozen=True)
class UnitOutcome:
    """How one stored unit ended: its verdict, and why in a line (the first error)."""

    unit: PlannedUnit
    verdict: str
    why: str = ""


@dataclass(frozen=True)
class PolicyBounds:
    """The numbers a numeric policy key accepts, both ends included (None: open).

    ``meaning`` says what the number is ("a fraction: 0.05 is 5% slower"), for the line
    that refuses a value out of bounds, so a percentage written as 5 is caught with its fix.
    """

    low: float | None = None
    high: float | None = None
    meaning: str = ""

    def admits(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def describe(self) -> str:
        """The accepted range in words: 'from 0 to 1', 'at least 0', 'at most 1'."""
        if self.low is not None and self.high is not None:
            return f"from {self.low:g} to {self.high:g}"
        if self.low is not None:
            return f"at least {self.low:g}"
        return f"at most {self.high:g}" if self.high is not None else "any number"


@dataclass(frozen=True)
class Finding:
    """One result of a section that deserves explaining (a slower benchmark, a test whose
    outcome changed), with what the explain section needs to measure it again.

    ``kind`` says what moved (``timing``: a time, candidate over baseline; ``outcome``: a
    test or claim); ``ratio`` with ``ci_low``/``ci_high`` the timing's change; ``delta`` the
    change in words; ``remeasure`` how to take one more sample of it, as plain data: a
    worker call ``{"call": "module:function", "kwargs": {...}, "value": [keys...]}`` whose
    answer, followed along ``value``, is one time in seconds (None: it cannot be re-run).
    ``facts`` holds what the section knows beside it (a traceback, the benchmark's spec).
    """

    section: str
    item: str
    kind: str
    delta: str
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    remeasure: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
