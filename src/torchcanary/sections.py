"""The section contract, and the registry that finds sections through entry points.

A section (claims, bench, drill, stack, diff, or one a third party ships) is one object that
satisfies :class:`Section`. It is found through the ``torchcanary.sections`` entry-point
group: an entry point names the object, e.g. ``drill = "torchcanary.drill.plugin:SECTION"``.
The built-in sections are registered in our own ``pyproject.toml`` exactly so; the plan, the
config, the CLI, the policy and every report derive their section lists from here, so a new
section plugs in at this one place.

Most sections are a package with ``section`` and ``report`` modules;
``package_section.PackageSection`` adapts such a package to the protocol, importing the
heavy modules only when they are used, so ``torchcanary --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from torchcanary.section_types import (
    Finding,
    FleetPart,
    JUnitCase,
    PlannedUnit,
    PolicyBounds,
    RunView,
    UnitOutcome,
)

if TYPE_CHECKING:
    from torchcanary.context import RunContext
    from torchcanary.plan import RunPlan
    from torchcanary.results import SectionRecord
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry, HistoryFilter
    from torchcanary.store.rows import RunRow, SectionResult

ENTRY_POINT_GROUP = "torchcanary.sections"
THIRD_PARTY_ORDER = 1000  # after every built-in section unless a plugin asks otherwise
ROWS_TABLE = "section_results"  # where a section's results are stored unless it says otherwise


class SectionDiscoveryError(Exception):
    """A section plugin could not be loaded or does not provide what the contract asks."""


@runtime_checkable
class Section(Protocol):
    """What every section provides; :func:`contract_gaps` checks a section against it.

    - ``name``: the config table, the ``--only`` word and the store's section column;
      ``order`` places it in a run (lower first); ``help`` is its subcommand's one line
      (``None``: no subcommand of its own, reached through ``run --only NAME``).
    - ``policy_defaults``: every policy key ``blocking_reasons`` reads, with its default
      (the value's type is the key's type). Optionally ``policy_choices``: for a key whose
      value (or each item of its list) is a word, the words allowed; the policy refuses
      any other at load, before the run (read through :func:`policy_choices`). Optionally
      ``policy_bounds``: for a numeric key, its :class:`PolicyBounds`; a value outside is
      refused at load the same way (read through :func:`policy_bounds`).
    - ``parse_settings(raw)``: the config table (file and flags merged) validated, with
      defaults filled in, as JSON-ready data stored in the plan; raises ConfigError.
    - ``missing_input(settings)``: ``(error, note)`` when the section cannot run as
      configured (the error if the user named it, the note if it was only a default).
      Optionally ``fed_by(outputs)``: whether the other sections' outputs give it what
      its own settings lack (the calls: the bench's workloads), so it runs all the same
      (read through :func:`fed_by_others`); ``outputs(settings)``: the named plain-JSON
      values it offers the other sections, from its own settings (``plan.outputs``; read
      through :func:`section_outputs`).
    - ``add_flags(parser, own_command)`` and ``flag_settings(args)``: its command-line
      flags (on its own subcommand when ``own_command``, else on ``run``) and what they
      set in its settings; ``named_by(args)`` says the flags ask for the section itself.
    - ``planned_units(plan)``: the units it will run, read from the plan alone before it
      runs (a claim x environment, a benchmark, a drill x trial, ...), each a
      :class:`PlannedUnit` that its stored rows name by key and environment; and
      ``checked_verdicts``: the verdicts that say a unit was checked. The core
      (``accounting.py``) counts every planned unit with no row, or whose verdict is not
      one of these, as not checked; a section never says itself that it did enough.
    - ``run(ctx)``: does the work, committing each finished unit to the store.
    - ``has_results(view)`` and ``blocking_reasons(view, policy)``: for the decision.
    - ``html``, ``markdown`` and ``junit_cases`` over a run view: its report parts.
    - ``record_from_json(data)``: one stored result ``{key, env_role, verdict, payload}``
      as the section's typed, versioned record (``results.SectionRecord``); older
      payloads without a ``schema`` version load as version 1. A section without typed
      records returns the plain ``store.rows.SectionResult``.
    - Optionally ``terminal(view)``: its part of the summary printed after a run, as rich
      renderables (the claims: a table); without it, or when it returns None, the summary
      shows its ``markdown`` (read through :func:`terminal_summary`).
    - Optionally ``history_plot(item, entries)``: how ``torchcanary history`` draws one of
      its items across runs, as SVG (the bench: a forest of ratios); without it, or when it
      returns None, the history is a strip of verdicts (read through :func:`history_plot`).
    - Optionally ``result_table``: the store table its results live in when it is not
      ``section_results`` (the claims: ``probe_results``); the run view then reads no rows
      for it (read through :func:`stores_rows`), and the section must then provide
      ``stored_units(view)``: how each unit it stored ended, as :class:`UnitOutcome`
      (read through :func:`stored_units`); a section whose rows hold several units (the
      drill: a row per drill and environment, holding its trials) provides it too.
    - Optionally ``load_view(store, run, rows)``: what its report parts read beside its
      rows, loaded once with the run view into ``view.section_views[name]`` (the claims:
      probe results, catalog and packs; the bench: each benchmark's recent history; read
      through :func:`section_view`).
    - Optionally ``json_parts(view)``: top-level entries it adds to ``results.json``
      (the claims: ``claims``, ``coverage``, ``packs``; read through :func:`json_parts`).
    - Optionally ``check_plan(plan)``: refuse, before anything is built, a plan it cannot
      run (the claims: a broken pack, or one for another release; read through
      :func:`check_plan`); ``worker_packages(plan)``: the top-level packages its workers
      import beyond torchcanary (read through :func:`worker_packages`).
    - Optionally ``fleet_part(view)``: its own side-by-side of a fleet run's profiles
      (a ``section_types.FleetPart``, the claims: a claim x profile matrix), shown in place
      of the fleet reports' generic one (read through :func:`fleet_part`); ``fit_plan(plan,
      profile)``: the plan narrowed to what a fleet node of that hardware can do, and each
      item left out with why; with nothing left it drops its own name from the plan's
      sections (the claims: the probes that need a device the node lacks; read through
      :func:`fit_plan`).
    - Optionally ``history(store, item, run_filter)`` and ``holds(store, item)``: an item's
      results across runs and whether a store has any, for ``torchcanary history``, when
      its results are not rows of ``section_results`` (the claims' probe results; read
      through :func:`item_history` and :func:`holds_item`); ``compared(view)``: its items'
      verdicts in a run (``{item: {"verdict": ...}}``, with ``ratio``, ``ci_low`` and
      ``ci_high`` for a measured item) for ``torchcanary compare`` (read through
      :func:`compared_items`; without it the section is not compared); with it,
      ``worse_verdicts``: the frozenset of those verdicts that are a change for the worse
      (the bench: slower; the claims: regressed; the drill: failed, error, flaky), so a list
      of regressions leaves improvements out (read through :func:`worse_verdicts`; without
      it none of its changes counts as worse).
    - Optionally ``across_nodes``: what ``--fleet ADDR --nodes N`` runs, a callable
      ``(executor, address, nodes, **options) -> runner.Venue`` that spreads a plan of
      this section alone over N Ray nodes, one rank on each (the bench: its collectives;
      the drill: its ranks, with ``shared_dir`` among the options); without it the section
      does not run across nodes (read through :func:`across_nodes`).
    - Optionally ``findings(view)``: its results of a run that deserve explaining (what
      moved the decision or deserves attention), as :class:`Finding` records with how to
      measure each again; the explain section reads them (read through :func:`findings`).
    - Optionally ``add_commands(commands)``: its own top-level commands beyond ``run``'s
      (the claims: ``probes``, ``packs``, ``claims checklist``), added to the CLI's
      subparsers, and their handlers by command (read through :func:`section_commands`).
    """

    name: str
    order: int
    help: str | None

    @property
    def policy_defaults(self) -> Mapping[str, Any]: ...

    @property
    def checked_verdicts(self) -> frozenset[str]: ...

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]: ...

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]: ...

    def missing_input(self, settings: Mapping[str, Any]) -> tuple[str, str] | None: ...

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None: ...

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]: ...

    def named_by(self, args: argparse.Namespace) -> bool: ...

    def run(self, ctx: RunContext) -> None: ...

    def has_results(self, view: RunView) -> bool: ...

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]: ...

    def html(self, view: RunView) -> str: ...

    def markdown(self, view: RunView) -> str: ...

    def junit_cases(self, view: RunView) -> list[JUnitCase]: ...

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord: ...


_CONTRACT_METHODS = (
    "planned_units",
    "parse_settings",
    "missing_input",
    "add_flags",
    "flag_settings",
    "named_by",
    "run",
    "has_results",
    "blocking_reasons",
    "html",
    "markdown",
    "junit_cases",
    "record_from_json",
)


def contract_gaps(section: object) -> list[str]:
    """What ``section`` lacks of the contract (empty when it is complete).

    Beyond the protocol's names, the values are checked: a name that is a valid config
    key, an int order, and policy defaults of a policy type.
    """
    gaps = [f"{a} is missing" for a in ("name", "order", "help") if not hasattr(section, a)]
    gaps += [f"{m}() is missing" for m in _CONTRACT_METHODS if not callable(getattr(section, m, 0))]
    name = getattr(section, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        gaps.append(f"name must be a word, not {name!r}")
    if not isinstance(getattr(section, "order", None), int):
        gaps.append("order must be an int")
    if not isinstance(getattr(section, "help", None), (str, type(None))):
        gaps.append("help must be a string or None")
    gaps += _accounting_gaps(section)
    try:
        defaults = section.policy_defaults  # type: ignore[attr-defined]
    except Exception as exc:
        return [*gaps, f"policy_defaults cannot be read: {type(exc).__name__}: {exc}"]
    if not isinstance(defaults, Mapping):
        gaps.append("policy_defaults must be a mapping")
    else:
        gaps += [
            f"policy key {key!r} has a default of type {type(value).__name__}"
            for key, value in defaults.items()
            if not isinstance(value, (bool, int, float, str, list))
        ]
        try:
            choices = policy_choices(section)
        except Exception as exc:
            return [*gaps, f"policy_choices cannot be read: {type(exc).__name__}: {exc}"]
        gaps += [
            f"policy_choices names {key!r}, which is not one of its policy keys"
            for key in choices
            if key not in defaults
        ]
        gaps += _bounds_gaps(section, defaults)
    return gaps


def _accounting_gaps(section: object) -> list[str]:
    """A plan's units are matched against stored verdicts: both halves must be declared."""
    try:
        checked = section.checked_verdicts  # type: ignore[attr-defined]
    except Exception as exc:
        return [f"checked_verdicts cannot be read: {type(exc).__name__}: {exc}"]
    gaps = []
    if not isinstance(checked, frozenset) or not all(isinstance(v, str) for v in checked):
        gaps.append("checked_verdicts must be a frozenset of verdict words")
    if result_table(section) != ROWS_TABLE and not callable(getattr(section, "stored_units", 0)):
        gaps.append("stored_units() is missing (its results are not section_results rows)")
    return gaps


def _bounds_gaps(section: object, defaults: Mapping[str, Any]) -> list[str]:
    """Bounds must be on numeric policy keys, and hold those keys' own defaults."""
    try:
        bounds = policy_bounds(section)
    except Exception as exc:
        return [f"policy_bounds cannot be read: {type(exc).__name__}: {exc}"]
    gaps = []
    for key, bound in bounds.items():
        default = defaults.get(key)
        if not isinstance(bound, PolicyBounds):
            gaps.append(f"policy_bounds[{key!r}] must be a PolicyBounds")
        elif isinstance(default, bool) or not isinstance(default, (int, float)):
            gaps.append(f"policy_bounds names {key!r}, which is not one of its numeric policy keys")
        elif not bound.admits(default):
            gaps.append(f"policy key {key!r} has a default {default!r} outside its bounds")
    return gaps


def fed_by_others(section: object, outputs: Mapping[str, Any]) -> bool:
    """Whether the other sections' outputs (``plan.outputs``) give ``section`` its input
    where its own settings have none (a section without the part: never)."""
    fed_by = getattr(section, "fed_by", None)
    return bool(fed_by(outputs)) if callable(fed_by) else False


def policy_choices(section: object) -> Mapping[str, tuple[str, ...]]:
    """The words each of ``section``'s policy keys allows (none declared: any value of its type)."""
    choices: Mapping[str, tuple[str, ...]] = getattr(section, "policy_choices", {})
    return choices


def terminal_summary(section: object, view: RunView) -> list[Any] | None:
    """``section``'s own part of the terminal summary (rich renderables), or None where it
    has none (the summary then shows its Markdown)."""
    render = getattr(section, "terminal", None)
    parts = render(view) if callable(render) else None
    return list(parts) if parts is not None else None


def history_plot(section: object, item: str, entries: list[HistoryEntry]) -> str | None:
    """``section``'s own drawing of ``item``'s history (SVG), or None where it has none."""
    draw = getattr(section, "history_plot", None)
    drawn = draw(item, entries) if callable(draw) else None
    return str(drawn) if drawn is not None else None


def reused(section: object, view: RunView) -> dict[str, tuple[int, int]]:
    """What ``section`` took from earlier runs instead of making it again, per kind:
    ``{"claim verdicts": (kept, of)}``; empty where it keeps nothing."""
    count = getattr(section, "reused", None)
    return dict(count(view)) if callable(count) else {}


def result_table(section: object) -> str:
    """The store table ``section``'s results live in (``section_results`` unless it says)."""
    return str(getattr(section, "result_table", ROWS_TABLE))


def stores_rows(section: object) -> bool:
    """Whether ``section``'s results are rows of ``section_results`` (an unknown one's are)."""
    return result_table(section) == ROWS_TABLE


def section_view(
    section: object, store: ResultStore, run: RunRow, rows: list[SectionResult]
) -> Any:
    """What ``section`` reads beside its rows, loaded with the run view (None: nothing)."""
    load = getattr(section, "load_view", None)
    return load(store, run, rows) if callable(load) else None


def json_parts(section: object, view: RunView) -> dict[str, Any]:
    """The top-level entries ``section`` adds to ``results.json`` (none by default)."""
    render = getattr(section, "json_parts", None)
    return dict(render(view)) if callable(render) else {}


def findings(section: object, view: RunView) -> list[Finding]:
    """What of ``section``'s results in ``view`` deserves explaining (none declared: none)."""
    find = getattr(section, "findings", None)
    return list(find(view)) if callable(find) else []


def stored_units(section: Section, view: RunView) -> list[UnitOutcome]:
    """How each unit ``section`` stored in ``view`` ended: its own reader's where it has
    one (results kept elsewhere, or rows that hold several units: a drill's trials), else
    each row is the unit of its key and environment."""
    read = getattr(section, "stored_units", None)
    own = read(view) if callable(read) else None
    if own is not None:
        return list(own)
    return [
        UnitOutcome(PlannedUnit(row.key, row.env_role), row.verdict, _why(row.payload))
        for row in view.sections.get(section.name, [])
    ]


def _why(payload: Mapping[str, Any]) -> str:
    """A stored unit's own words on how it ended (its first error, else its reason)."""
    for key in ("first_error", "error", "reason", "detail"):
        if payload.get(key):
            return str(payload[key])
    return ""


def fleet_part(section: object, view: RunView) -> FleetPart | None:
    """``section``'s own side-by-side of a fleet run's profiles, or None (the generic one)."""
    render = getattr(section, "fleet_part", None)
    part: FleetPart | None = render(view) if callable(render) else None
    return part


def across_nodes(section: object) -> Callable[..., Any] | None:
    """What makes ``section``'s ``runner.Venue`` across N Ray nodes (``--nodes``), or None
    where it does not run across nodes."""
    venue = getattr(section, "across_nodes", None)
    return venue if callable(venue) else None


def check_plan(section: object, plan: RunPlan) -> None:
    """Refuse, before anything is built, a plan ``section`` cannot run (raises a CanaryError;
    none declared: every plan will do)."""
    check = getattr(section, "check_plan", None)
    if callable(check):
        check(plan)


def worker_packages(section: object, plan: RunPlan) -> set[str]:
    """Top-level packages ``section``'s workers import beyond torchcanary (the claims: every
    pack's and probe plugin's), linked into the workers' import root."""
    find = getattr(section, "worker_packages", None)
    return set(find(plan)) if callable(find) else set()


def section_commands(section: Section, commands: Any) -> dict[str, Any]:
    """Add ``section``'s own top-level commands to the CLI's ``commands`` (subparsers);
    their handlers by command (none declared: none). A plugin whose hook raises is a
    SectionDiscoveryError naming it (one line, exit 2), not a traceback."""
    add = getattr(section, "add_commands", None)
    if not callable(add):
        return {}
    with _plugin_hook(section, "add_commands"):
        return dict(add(commands))


def section_flags(section: Section, parser: argparse.ArgumentParser, own_command: bool) -> None:
    """Add ``section``'s flags to ``parser``; a hook that raises is a SectionDiscoveryError
    naming the section, as for ``section_commands``."""
    with _plugin_hook(section, "add_flags"):
        section.add_flags(parser, own_command)


@contextlib.contextmanager
def _plugin_hook(section: Section, hook: str) -> Iterator[None]:
    """A plugin's CLI hook, whose failure is the plugin's to fix, not a run's no-go."""
    try:
        yield
    except Exception as exc:
        raise SectionDiscoveryError(
            f"section plugin {section.name!r}: {hook}() failed: {type(exc).__name__}: {exc}"
        ) from exc


def fit_plan(section: object, plan: RunPlan, profile: Any) -> tuple[RunPlan, dict[str, str]]:
    """``plan`` narrowed to what ``section`` can do on ``profile``'s hardware (a
    ``fleet.profile.HardwareProfile``, not imported: the fleet reads this registry), and
    each item left out with why (none declared: the plan as it is)."""
    fit = getattr(section, "fit_plan", None)
    return fit(plan, profile) if callable(fit) else (plan, {})  # type: ignore[no-any-return]


def item_history(
    section: Section, store: ResultStore, item: str, run_filter: HistoryFilter
) -> list[HistoryEntry]:
    """``item``'s results in ``section`` across the runs that pass ``run_filter``, oldest
    first: its own reader's, else its ``section_results`` rows read as its records."""
    read = getattr(section, "history", None)
    entries = read(store, item, run_filter) if callable(read) else None
    if entries is not None:
        return list(entries)
    from torchcanary.store.history import history

    return history(store, item, section.name, run_filter, section.record_from_json)


def holds_item(section: Section, store: ResultStore, item: str) -> bool:
    """Whether any run of ``store`` has a result for ``item`` in ``section``."""
    find = getattr(section, "holds", None)
    held = find(store, item) if callable(find) else None
    if held is not None:
        return bool(held)
    from torchcanary.store.history import has_rows

    return has_rows(store, section.name, item)


def compared_items(section: object, view: RunView) -> dict[str, dict[str, Any]] | None:
    """``section``'s items' verdicts (and intervals) in ``view`` for ``compare``, or None
    where it has nothing to compare."""
    read = getattr(section, "compared", None)
    found = read(view) if callable(read) else None
    return dict(found) if found is not None else None


def worse_verdicts(section: object) -> frozenset[str]:
    """The verdicts of ``section``'s ``compared`` items that are a change for the worse."""
    return frozenset(getattr(section, "worse_verdicts", frozenset()))


def policy_bounds(section: object) -> Mapping[str, PolicyBounds]:
    """The bounds of ``section``'s numeric policy keys (none declared: any number)."""
    bounds: Mapping[str, PolicyBounds] = getattr(section, "policy_bounds", {})
    return bounds


def _source_tree_entry_points() -> list[EntryPoint]:
    """Our own group as the source tree's pyproject.toml declares it.

    Used only when the installed metadata has none of our sections (a source tree run
    without installing, or an editable install made before the group existed), so the
    list is still written in one place.
    """
    from torchcanary.config_toml import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return []
    table = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {})
    return [
        EntryPoint(name, value, ENTRY_POINT_GROUP)
        for name, value in table.get(ENTRY_POINT_GROUP, {}).items()
    ]


def _load(entry: EntryPoint) -> Section:
    # A broken plugin names itself and the package that installed it: what to fix or remove.
    package = entry.dist.name if entry.dist is not None else "an unknown package"
    plugin = f"section plugin {entry.name!r} ({entry.value}, from {package})"
    try:
        section = entry.load()
    except Exception as exc:
        raise SectionDiscoveryError(
            f"{plugin} failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    gaps = contract_gaps(section)
    if gaps:
        raise SectionDiscoveryError(f"{plugin} breaks the contract: {'; '.join(gaps)}")
    if section.name != entry.name:
        raise SectionDiscoveryError(
            f"{plugin} is named {section.name!r}; "
            "the entry point's name and the section's must agree"
        )
    return section  # type: ignore[no-any-return]


@functools.cache
def registered() -> dict[str, Section]:
    """Every installed section by name, in run order."""
    found = list(entry_points(group=ENTRY_POINT_GROUP))
    if not any(ep.value.startswith("torchcanary.") for ep in found):
        found += _source_tree_entry_points()
    by_name: dict[str, Section] = {}
    for entry in found:
        if entry.name in by_name:
            continue  # the same distribution seen twice on sys.path
        by_name[entry.name] = _load(entry)
    return dict(sorted(by_name.items(), key=lambda item: (item[1].order, item[0])))


def section_names() -> tuple[str, ...]:
    """Every registered section's name, in run order: what a run does by default."""
    return tuple(registered())


def get_section(name: str) -> Section:
    """The registered section called ``name``; KeyError when there is none."""
    return registered()[name]


def section_outputs(section: object, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The named plain-JSON values ``section`` offers the other sections, from its parsed
    ``settings`` (none declared: none); they reach the others as ``plan.outputs``."""
    offer = getattr(section, "outputs", None)
    return dict(offer(settings)) if callable(offer) else {}
