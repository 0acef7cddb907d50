"""What one explainer is handed and what it hands back (the core's side of the plug).

An explainer (startup, settings, ops, compile phases) looks at one finding and, within the
time left, measures what it can. It returns a :class:`Contribution`: causes with shares,
the unexplained share it measured (None: it measured no whole), and what it did not check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from torchcanary.context import RunContext
from torchcanary.explain.cause import Cause
from torchcanary.explain.settings import ExplainSettings
from torchcanary.section_types import Finding, RunView


@dataclass
class ExplainJob:
    """The run being explained, its settings and the deadline of the explain budget."""

    ctx: RunContext
    view: RunView
    settings: ExplainSettings
    deadline: float  # time.monotonic() past which nothing new is measured
    # The run's findings of kind "change" (the diff's): candidate causes, not explained.
    changes: list[Finding] = field(default_factory=list)

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def call_timeout_s(self) -> float:
        """How long one worker call may take: the budget left, within [60 s, 15 min] (with
        no budget cap, ``--explain full``, a hung call still ends)."""
        return min(max(60.0, self.seconds_left()), 900.0)


@dataclass(frozen=True)
class Contribution:
    """What one explainer found for one finding."""

    causes: tuple[Cause, ...] = ()
    # (share, low, high) of the delta no cause of this explainer accounts for.
    unexplained: tuple[float, float, float] | None = None
    not_checked: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


class Explainer(Protocol):
    """One way to explain a finding: ``applies`` says whether it can, ``explain`` measures."""

    @property
    def name(self) -> str: ...

    @property
    def measures(self) -> bool:
        """Whether it runs measurements (and so waits for the budget); a reader of what
        the run already holds (tracebacks) costs nothing and always runs."""
        ...

    def applies(self, finding: Finding) -> bool: ...

    def explain(self, job: ExplainJob, finding: Finding) -> Contribution: ...


@dataclass(frozen=True)
class FunctionExplainer:
    """An explainer made of two functions (each explainer module builds one)."""

    name: str
    applies_to: Callable[[Finding], bool]
    measure: Callable[[ExplainJob, Finding], Contribution]
    measures: bool = True

    def applies(self, finding: Finding) -> bool:
        return self.applies_to(finding)

    def explain(self, job: ExplainJob, finding: Finding) -> Contribution:
        return self.measure(job, finding)
