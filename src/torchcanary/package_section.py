"""A section made of a package's modules, adapted to the section contract (``sections.py``).

The heavy modules (``section``, ``report``, ...) are imported only when a part of the
contract is used, so ``torchcanary --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from torchcanary.section_types import (
    Finding,
    FleetPart,
    JUnitCase,
    PlannedUnit,
    PolicyBounds,
    RunView,
    UnitOutcome,
)
from torchcanary.sections import ROWS_TABLE, THIRD_PARTY_ORDER

if TYPE_CHECKING:
    from torchcanary.context import RunContext
    from torchcanary.plan import RunPlan
    from torchcanary.results import SectionRecord
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry, HistoryFilter
    from torchcanary.store.rows import RunRow, SectionResult


@dataclass(frozen=True)
class PackageSection:
    """A section whose work lives in ``<package>.section`` and its report in ``<package>.report``.

    ``section`` provides ``POLICY_DEFAULTS``, ``CHECKED_VERDICTS``, ``planned_units``,
    ``parse_settings``, ``run`` and ``blocking_reasons``; ``report`` provides ``html``,
    ``markdown`` and ``junit_cases``;
    ``<package>.result``, where there is one, provides ``from_json`` for its typed records
    (without it the rows stay plain ``SectionResult``); ``<package>.view``, where there is
    one, provides ``load`` (its ``load_view``), ``<package>.fleet`` ``fleet_part``,
    ``<package>.fit`` ``fit_plan``, ``<package>.across_nodes`` ``venue`` (its
    ``across_nodes``), ``<package>.history`` any of ``history``, ``holds``,
    ``compared`` and ``WORSE_VERDICTS`` (its ``worse_verdicts``), and
    ``<package>.commands`` ``add_commands``;
    ``section`` may provide ``stored_units`` (how its units ended, where its results are
    not ``section_results`` rows), ``check_plan`` and ``worker_packages``;
    ``report`` may provide ``history_plot`` (how the ``history`` command draws an item),
    ``terminal`` (its part of the summary printed after a run), ``json_parts`` and
    ``reused`` (what the run took from earlier runs: the time line names it), and
    ``section`` may declare ``POLICY_CHOICES`` and ``POLICY_BOUNDS``.
    The flags hooks default to none; pass ``add_flags``/``flag_settings`` to give some;
    ``input_elsewhere`` (its ``fed_by``) says the other sections' outputs give what its own
    settings lack; ``section`` may provide ``outputs`` (what it offers the others).
    """

    name: str
    package: str
    order: int = THIRD_PARTY_ORDER
    help: str | None = None
    flags: Callable[[argparse.ArgumentParser, bool], None] | None = None
    settings_from_flags: Callable[[argparse.Namespace], dict[str, Any]] | None = None
    named_by_flags: Callable[[argparse.Namespace], bool] | None = None
    input_check: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None = None
    input_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None
    result_table: str = ROWS_TABLE
    # Each part's module, or None for an optional part the package does not have (looked
    # for once: history and compare ask for every item).
    _cache: dict[str, ModuleType | None] = field(default_factory=dict, compare=False, repr=False)

    def _module(self, part: str) -> ModuleType:
        module = self._optional_module(part)
        if module is None:
            name = f"{self.package}.{part}"
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return module

    def _optional_module(self, part: str) -> ModuleType | None:
        """``<package>.<part>``, or None where the package has no such module."""
        if part not in self._cache:
            try:
                self._cache[part] = importlib.import_module(f"{self.package}.{part}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{self.package}.{part}":
                    raise
                self._cache[part] = None
        return self._cache[part]

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        return dict(self._module("section").POLICY_DEFAULTS)

    @property
    def checked_verdicts(self) -> frozenset[str]:
        return frozenset(self._module("section").CHECKED_VERDICTS)

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        return list(self._module("section").planned_units(plan))

    def stored_units(self, view: RunView) -> list[UnitOutcome] | None:
        read = getattr(self._module("section"), "stored_units", None)
        return list(read(view)) if read is not None else None

    @property
    def policy_choices(self) -> Mapping[str, tuple[str, ...]]:
        return dict(getattr(self._module("section"), "POLICY_CHOICES", {}))

    @property
    def policy_bounds(self) -> Mapping[str, PolicyBounds]:
        return dict(getattr(self._module("section"), "POLICY_BOUNDS", {}))

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        parsed: dict[str, Any] = self._module("section").parse_settings(dict(raw))
        return parsed

    def missing_input(self, settings: Mapping[str, Any]) -> tuple[str, str] | None:
        return self.input_check(settings) if self.input_check else None

    def fed_by(self, outputs: Mapping[str, Any]) -> bool:
        return bool(self.input_elsewhere(outputs)) if self.input_elsewhere else False

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        offer = getattr(self._module("section"), "outputs", None)
        return dict(offer(dict(settings))) if offer is not None else {}

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        if self.flags:
            self.flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return dict(self.settings_from_flags(args)) if self.settings_from_flags else {}

    def named_by(self, args: argparse.Namespace) -> bool:
        return bool(self.named_by_flags(args)) if self.named_by_flags else False

    def run(self, ctx: RunContext) -> None:
        self._module("section").run(ctx)

    def has_results(self, view: RunView) -> bool:
        return bool(view.sections.get(self.name))

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        return list(self._module("section").blocking_reasons(view, policy))

    def html(self, view: RunView) -> str:
        return str(self._module("report").html(view))

    def markdown(self, view: RunView) -> str:
        return str(self._module("report").markdown(view))

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        return list(self._module("report").junit_cases(view))

    def terminal(self, view: RunView) -> list[Any] | None:
        render = getattr(self._module("report"), "terminal", None)
        return list(render(view)) if render is not None else None

    def history_plot(self, item: str, entries: list[HistoryEntry]) -> str | None:
        draw = getattr(self._module("report"), "history_plot", None)
        return str(draw(item, entries)) if draw is not None else None

    def json_parts(self, view: RunView) -> dict[str, Any]:
        render = getattr(self._module("report"), "json_parts", None)
        return dict(render(view)) if render is not None else {}

    def reused(self, view: RunView) -> dict[str, tuple[int, int]]:
        count = getattr(self._module("report"), "reused", None)
        return dict(count(view)) if count is not None else {}

    def load_view(self, store: ResultStore, run: RunRow, rows: list[SectionResult]) -> Any:
        module = self._optional_module("view")
        return module.load(store, run, rows) if module is not None else None

    def findings(self, view: RunView) -> list[Finding]:
        module = self._optional_module("findings")
        return list(module.findings(view)) if module is not None else []

    def check_plan(self, plan: RunPlan) -> None:
        check = getattr(self._module("section"), "check_plan", None)
        if check is not None:
            check(plan)

    def worker_packages(self, plan: RunPlan) -> set[str]:
        find = getattr(self._module("section"), "worker_packages", None)
        return set(find(plan)) if find is not None else set()

    def fleet_part(self, view: RunView) -> FleetPart | None:
        module = self._optional_module("fleet")
        return module.fleet_part(view) if module is not None else None  # type: ignore[no-any-return]

    @property
    def across_nodes(self) -> Callable[..., Any] | None:
        module = self._optional_module("across_nodes")
        return module.venue if module is not None else None  # type: ignore[no-any-return]

    def add_commands(self, commands: Any) -> dict[str, Any]:
        module = self._optional_module("commands")
        return dict(module.add_commands(commands)) if module is not None else {}

    def fit_plan(self, plan: RunPlan, profile: Any) -> tuple[RunPlan, dict[str, str]]:
        module = self._optional_module("fit")
        return module.fit_plan(plan, profile) if module is not None else (plan, {})  # type: ignore[no-any-return]

    def history(
        self, store: ResultStore, item: str, run_filter: HistoryFilter
    ) -> list[HistoryEntry] | None:
        read = getattr(self._optional_module("history"), "history", None)
        return list(read(store, item, run_filter)) if read is not None else None

    def holds(self, store: ResultStore, item: str) -> bool | None:
        find = getattr(self._optional_module("history"), "holds", None)
        return bool(find(store, item)) if find is not None else None

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        read = getattr(self._optional_module("history"), "compared", None)
        return dict(read(view)) if read is not None else None

    @property
    def worse_verdicts(self) -> frozenset[str]:
        return frozenset(getattr(self._optional_module("history"), "WORSE_VERDICTS", ()))

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        records = self._optional_module("result")
        if records is None:
            from torchcanary.store.rows import SectionResult

            return SectionResult.from_json(dict(data), self.name)
        record: SectionRecord = records.from_json(dict(data))
        return record
