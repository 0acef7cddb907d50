"""The section contract: every part a section may provide, declared once, here.

A section (claims, bench, drill, stack, diff, calls, explain, or one a third party ships)
is a subclass of :class:`Section`, found through the ``torchcanary.sections`` entry-point
group (``drill = "torchcanary.drill.plugin:SECTION"``, naming an instance). This module is
all a section's author reads: each part is declared below with its signature, and says
whether it is required (an abstract member: a section without it is refused at load) or
optional (its body here is what the core does when a section leaves it out). The core
calls the parts by these names and no others; a section never imports another section,
and what one needs from another arrives as a declared output (:meth:`Section.outputs`).

The types a section speaks are re-exported here, so a third-party section imports from
this module alone.
"""

from __future__ import annotations

import abc
import argparse
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from torchcanary.context import RunContext
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.section_types import (
    Finding,
    FleetPart,
    JUnitCase,
    PlannedUnit,
    PolicyBounds,
    RunView,
    UnitOutcome,
)
from torchcanary.store.rows import SectionResult

if TYPE_CHECKING:
    from torchcanary.hardware_profile import HardwareProfile
    from torchcanary.results import SectionRecord
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry, HistoryFilter
    from torchcanary.store.rows import RunRow

__all__ = [
    "ROWS_TABLE",
    "THIRD_PARTY_ORDER",
    "ConfigError",
    "Finding",
    "FleetPart",
    "FromModule",
    "JUnitCase",
    "PlannedUnit",
    "PolicyBounds",
    "RunContext",
    "RunPlan",
    "RunView",
    "Section",
    "SectionResult",
    "UnitOutcome",
]

THIRD_PARTY_ORDER = 1000  # after every built-in section unless a plugin asks otherwise
ROWS_TABLE = "section_results"  # where a section's results are stored unless it says otherwise


class FromModule:
    """A part done by a function or value of another module, named ``"package.module:name"``
    and imported on first use, so loading a section (``torchcanary --help``) imports none
    of its work: ``html = FromModule("my_section.report:html")``. The function is called
    with the part's arguments (no ``self``); its signature is checked against the part's by
    ``tests/test_sections_contract.py``, not at load, which would import it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.module, _, self.name = target.partition(":")

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


class Section(abc.ABC):
    """One section of a run: what it plans, runs, decides and reports.

    Required values (class attributes): ``name``, the config table, the ``--only`` word and
    the store's section column (a Python identifier, equal to its entry point's name);
    ``order``, its place in a run (lower first); ``help``, its subcommand's one line
    (None: no subcommand of its own, reached through ``run --only NAME``).
    """

    name: ClassVar[str]
    order: ClassVar[int]
    help: ClassVar[str | None]

    # Optional values.
    result_table: ClassVar[str] = ROWS_TABLE
    """The store table its results live in when it is not ``section_results`` (the claims:
    ``probe_results``); the run view then reads no rows for it, and it must provide
    :meth:`stored_units`."""

    # -- Settings and the command line ------------------------------------------------------

    @property
    @abc.abstractmethod
    def policy_defaults(self) -> Mapping[str, Any]:
        """Required: every policy key :meth:`blocking_reasons` reads, with its default (the
        value's type is the key's type: bool, int, float, str or list)."""

    @property
    def policy_choices(self) -> Mapping[str, tuple[str, ...]]:
        """For a policy key whose value (or each item of its list) is a word, the words
        allowed; any other is refused when the policy loads, before the run."""
        return {}

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        """For a numeric policy key, the numbers it accepts; a value outside is refused
        when the policy loads."""
        return {}

    @abc.abstractmethod
    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Required: its config table (file and flags merged) validated, defaults filled
        in, as JSON-ready data stored in the plan; raises ConfigError."""

    def missing_input(self, settings: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(error, note)`` when it cannot run as configured: the error if the user named
        it, the note if it was only a default (None: it can run)."""
        return None

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Named plain-JSON values it offers the other sections, from its own parsed
        settings (the bench: ``workloads``); the core gathers them into ``plan.outputs``."""
        return {}

    def fed_by(self, outputs: Mapping[str, Any]) -> bool:
        """Whether the other sections' outputs give it the input its own table lacks (the
        calls: the bench's workloads), so it runs all the same."""
        return False

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        """Its command-line flags: on its own subcommand when ``own_command``, else on
        ``run``."""
        return None

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        """What its flags set in its settings."""
        return {}

    def named_by(self, args: argparse.Namespace) -> bool:
        """Whether the flags ask for the section itself (``run --stack CMD``)."""
        return False

    def add_commands(self, commands: Any) -> dict[str, Any]:
        """Its own top-level commands beyond ``run``'s (the claims: ``probes``), added to
        the CLI's subparsers; their handlers by command."""
        return {}

    # -- Planning and running ---------------------------------------------------------------

    @abc.abstractmethod
    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        """Required: the units it will run, read from the plan alone before it runs (a
        claim x environment, a benchmark, a drill x trial), each named by the key and
        environment its stored rows will carry. The core counts every planned unit with
        no row, or whose verdict is not in :attr:`checked_verdicts`, as not checked."""

    @property
    @abc.abstractmethod
    def checked_verdicts(self) -> frozenset[str]:
        """Required: the verdicts that say a unit was checked."""

    def check_plan(self, plan: RunPlan) -> None:
        """Refuse, before anything is built, a plan it cannot run (raise a CanaryError)."""
        return None

    def worker_packages(self, plan: RunPlan) -> set[str]:
        """Top-level packages its workers import beyond torchcanary, linked into the
        workers' import root."""
        return set()

    def fit_plan(self, plan: RunPlan, profile: HardwareProfile) -> tuple[RunPlan, dict[str, str]]:
        """The plan narrowed to what a fleet node of ``profile``'s hardware can do, and
        each item left out with why; with nothing left it drops its own name from the
        plan's sections."""
        return plan, {}

    @property
    def across_nodes(self) -> Callable[..., Any] | None:
        """What ``--fleet ADDR --nodes N`` runs: ``(executor, address, nodes, **options) ->
        nodes_work.NodesWork``, spreading a plan of this section alone over N nodes (None:
        it does not run across nodes). The core makes the run and decides it."""
        return None

    @abc.abstractmethod
    def run(self, ctx: RunContext) -> None:
        """Required: does the work, committing each finished unit to the store."""

    # -- Reading results --------------------------------------------------------------------

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        """One stored result ``{key, env_role, verdict, payload}`` as its typed, versioned
        record; without typed records, the plain row."""
        return SectionResult.from_json(dict(data), self.name)

    def load_view(self, store: ResultStore, run: RunRow, rows: list[SectionResult]) -> Any:
        """What its report parts read beside its rows, loaded once with the run view into
        ``view.section_views[name]``."""
        return None

    def stored_units(self, view: RunView) -> list[UnitOutcome] | None:
        """How each unit it stored ended, where a row is not one unit (rows that hold
        trials, or results kept in its own table). None: each row is one unit."""
        return None

    def has_results(self, view: RunView) -> bool:
        """Whether the run holds any of its results."""
        return bool(view.sections.get(self.name))

    @abc.abstractmethod
    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        """Required: why its results say no-go under ``policy`` (empty: they do not)."""

    def findings(self, view: RunView) -> list[Finding]:
        """Its results that deserve explaining, with how to measure each again (the
        explain section reads them)."""
        return []

    def reproducible(self, view: RunView) -> list[Finding]:
        """Its results a standalone script can show (``torchcanary repro``): each as a
        ``Finding`` whose ``kind`` names the writer (``repro/writers.py``) and whose
        ``facts`` hold what that writer reads (a recorded call, a probe, a timed kernel)."""
        return []

    # -- Reports ------------------------------------------------------------------------------

    @abc.abstractmethod
    def html(self, view: RunView) -> str:
        """Required: its part of the HTML report."""

    @abc.abstractmethod
    def markdown(self, view: RunView) -> str:
        """Required: its part of ``summary.md``."""

    @abc.abstractmethod
    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        """Required: its JUnit test cases."""

    def terminal(self, view: RunView) -> list[Any] | None:
        """Its part of the summary printed after a run, as rich renderables (None: its
        Markdown is shown)."""
        return None

    def json_parts(self, view: RunView) -> dict[str, Any]:
        """Top-level entries it adds to ``results.json``."""
        return {}

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        """What it took from earlier runs instead of making it again, per kind:
        ``{"claim verdicts": (kept, of)}``."""
        return {}

    def fleet_part(self, view: RunView) -> FleetPart | None:
        """Its own side-by-side of a fleet run's profiles (None: the generic one)."""
        return None

    # -- Across runs --------------------------------------------------------------------------

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        """Its items' verdicts in a run (``{item: {"verdict": ...}}``, with ``ratio``,
        ``ci_low`` and ``ci_high`` for a measured item) for ``torchcanary compare`` (None:
        it is not compared)."""
        return None

    @property
    def worse_verdicts(self) -> frozenset[str]:
        """The verdicts of its :meth:`compared` items that are a change for the worse (the
        bench: slower), so a list of regressions leaves improvements out."""
        return frozenset()

    def history(
        self, store: ResultStore, item: str, run_filter: HistoryFilter
    ) -> list[HistoryEntry] | None:
        """An item's results across runs, when they are not rows of ``section_results``
        (None: the rows are read)."""
        return None

    def holds(self, store: ResultStore, item: str) -> bool | None:
        """Whether a store has any result for ``item``, read as :meth:`history` reads
        (None: the rows are looked up)."""
        return None

    def history_plot(self, item: str, entries: list[HistoryEntry]) -> str | None:
        """How ``torchcanary history`` draws one of its items across runs, as SVG (None:
        a strip of verdicts)."""
        return None
