"""The registry that finds sections through entry points, and the core's checks of them.

A section is an instance of a ``contract.Section`` subclass (the contract, every part with
its signature, is declared in ``contract.py``), found through the ``torchcanary.sections``
entry-point group: ``drill = "torchcanary.drill.plugin:SECTION"``. The built-in sections
are registered in our own ``pyproject.toml`` exactly so; the plan, the config, the CLI,
the policy and every report derive their section lists from here, so a new section plugs
in at this one place. A section that breaks the contract is refused when it loads.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import functools
import inspect
from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.contract import ROWS_TABLE, FromModule, Section
from torchcanary.errors import ConfigError
from torchcanary.plan import MOVED_IN_SCHEMA_2, RunPlan
from torchcanary.plan import SCHEMA as PLAN_SCHEMA
from torchcanary.section_types import PlannedUnit, PolicyBounds, RunView, UnitOutcome

if TYPE_CHECKING:
    from torchcanary.store.base import ResultStore
    from torchcanary.store.history import HistoryEntry, HistoryFilter

ENTRY_POINT_GROUP = "torchcanary.sections"


class SectionDiscoveryError(Exception):
    """A section plugin could not be loaded or does not provide what the contract asks."""


def contract_gaps(section: object) -> list[str]:
    """What ``section`` lacks of the contract (empty when it is complete).

    The contract's required parts are abstract, so a subclass that leaves one out cannot be
    made at all; here the values are checked (a name that is a valid config key, an int
    order, policy defaults of a policy type), each part it overrides against the
    contract's signature, and any public name that is not a part of the contract (a part
    under another name would otherwise be silently ignored).
    """
    if not isinstance(section, Section):
        return [f"it is a {type(section).__name__}, not a torchcanary.contract.Section"]
    gaps = [f"{a} is missing" for a in ("name", "order", "help") if not hasattr(section, a)]
    name = getattr(section, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        gaps.append(f"name must be a word, not {name!r}")
    if not isinstance(getattr(section, "order", None), int):
        gaps.append("order must be an int")
    if not isinstance(getattr(section, "help", None), (str, type(None))):
        gaps.append("help must be a string or None")
    gaps += _unknown_parts(section) + _signature_gaps(section) + _accounting_gaps(section)
    try:
        defaults = section.policy_defaults
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
            choices = section.policy_choices
        except Exception as exc:
            return [*gaps, f"policy_choices cannot be read: {type(exc).__name__}: {exc}"]
        gaps += [
            f"policy_choices names {key!r}, which is not one of its policy keys"
            for key in choices
            if key not in defaults
        ]
        gaps += _bounds_gaps(section, defaults)
    return gaps


_PARTS = frozenset(n for n in [*dir(Section), *Section.__annotations__] if not n.startswith("_"))


def _unknown_parts(section: Section) -> list[str]:
    """Public names the section's own classes define that the contract does not declare."""
    own = {
        attr
        for cls in type(section).__mro__
        if cls not in (Section, object, abc.ABC) and not cls.__module__.startswith("typing")
        for attr in vars(cls)
        if not attr.startswith("_")
    }
    return [
        f"{attr} is not a part of the contract (torchcanary.contract.Section declares each)"
        for attr in sorted(own - _PARTS)
    ]


def _signature_gaps(section: Section) -> list[str]:
    """A part overridden with other parameters than the contract declares."""
    gaps = []
    for attr in sorted(_PARTS):
        declared = inspect.getattr_static(Section, attr, None)
        provided = inspect.getattr_static(section, attr)
        if provided is declared or not inspect.isfunction(declared):
            continue
        if isinstance(provided, FromModule):
            continue  # checked by the tests: resolving it here would import the section's work
        if not callable(provided):
            gaps.append(f"{attr} must be a method")
            continue
        want = _positional(declared)
        got = (
            _positional(provided.__func__, takes_self=False)
            if isinstance(provided, staticmethod)
            else _positional(provided)
        )
        if got is not None and want != got:
            gaps.append(f"{attr}() takes {got} arguments; the contract's takes {want}")
    return gaps


def _positional(function: Any, takes_self: bool = True) -> int | None:
    """How many arguments a part takes besides ``self`` (None: any number)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None
    return len(parameters) - takes_self


def _accounting_gaps(section: Section) -> list[str]:
    """A plan's units are matched against stored verdicts: both halves must be declared."""
    try:
        checked = section.checked_verdicts
    except Exception as exc:
        return [f"checked_verdicts cannot be read: {type(exc).__name__}: {exc}"]
    gaps = []
    if not isinstance(checked, frozenset) or not all(isinstance(v, str) for v in checked):
        gaps.append("checked_verdicts must be a frozenset of verdict words")
    if not stores_rows(section) and type(section).stored_units is Section.stored_units:
        gaps.append("stored_units() is missing (its results are not section_results rows)")
    return gaps


def _bounds_gaps(section: Section, defaults: Mapping[str, Any]) -> list[str]:
    """Bounds must be on numeric policy keys, and hold those keys' own defaults."""
    try:
        bounds = section.policy_bounds
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


def stores_rows(section: Section) -> bool:
    """Whether ``section``'s results are rows of ``section_results``."""
    return section.result_table == ROWS_TABLE


def stored_units(section: Section, view: RunView) -> list[UnitOutcome]:
    """How each unit ``section`` stored in ``view`` ended: its own reader's where it has
    one (results kept elsewhere, or rows that hold several units: a drill's trials), else
    each row is the unit of its key and environment."""
    own = section.stored_units(view)
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


def section_commands(section: Section, commands: Any) -> dict[str, Any]:
    """Add ``section``'s own top-level commands to the CLI's ``commands`` (subparsers);
    their handlers by command. A plugin whose hook raises is a SectionDiscoveryError naming
    it (one line, exit 2), not a traceback."""
    with _plugin_hook(section, "add_commands"):
        return dict(section.add_commands(commands))


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


def item_history(
    section: Section, store: ResultStore, item: str, run_filter: HistoryFilter
) -> list[HistoryEntry]:
    """``item``'s results in ``section`` across the runs that pass ``run_filter``, oldest
    first: its own reader's, else its ``section_results`` rows read as its records."""
    entries = section.history(store, item, run_filter)
    if entries is not None:
        return list(entries)
    from torchcanary.store.history import history

    return history(store, item, section.name, run_filter, section.record_from_json)


def holds_item(section: Section, store: ResultStore, item: str) -> bool:
    """Whether any run of ``store`` has a result for ``item`` in ``section``."""
    held = section.holds(store, item)
    if held is not None:
        return bool(held)
    from torchcanary.store.history import has_rows

    return has_rows(store, section.name, item)


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
    return section


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


def collect_outputs(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the sections with these parsed settings offer one another, by name (each
    section's ``outputs``); a name offered by two sections is a ConfigError naming both."""
    outputs: dict[str, Any] = {}
    offered_by: dict[str, str] = {}
    for name, parsed in settings.items():
        for key, value in get_section(name).outputs(parsed).items():
            if key in offered_by:
                raise ConfigError(
                    f"sections {offered_by[key]!r} and {name!r} both offer the output {key!r}; "
                    "uninstall one of them, or ask its author to rename it"
                )
            outputs[key], offered_by[key] = value, name
    return outputs


def settings_owners(keys: Iterable[str]) -> dict[str, list[str]]:
    """For each of ``keys``, the sections whose tables take it (their default settings
    have it): where a key that is not the plan's own belongs."""
    owners: dict[str, list[str]] = {key: [] for key in keys}
    for name in section_names():
        try:
            defaults = get_section(name).parse_settings({})
        except ConfigError:
            continue
        for key, found in owners.items():
            if key in defaults:
                found.append(name)
    return owners


def load_plan(data: Mapping[str, Any]) -> RunPlan:
    """A stored plan, of any schema. Schema 1 kept the claims' settings at its top
    (``probes``, ``probe_modules``, ``probe_timeout_s``, ``release``, ``regression``):
    each goes to the settings of the sections whose tables take it now, and the outputs
    are what the sections' settings offer, as for a new plan."""
    data = dict(data)
    moved = [key for key in MOVED_IN_SCHEMA_2 if key in data]
    if data.get("schema", 1) >= PLAN_SCHEMA or not moved:
        return RunPlan.from_json(data)
    upgraded = {k: v for k, v in data.items() if k not in MOVED_IN_SCHEMA_2}
    settings = {name: dict(table) for name, table in data.get("settings", {}).items()}
    offering = {name: dict(table) for name, table in settings.items()}
    for key, owners in settings_owners(moved).items():
        value = list(data[key]) if isinstance(data[key], list | tuple) else data[key]
        for owner in owners:
            offering.setdefault(owner, {})[key] = value
            if owner in data.get("sections", ()):
                settings.setdefault(owner, {})[key] = value
    upgraded["settings"] = settings
    known = set(section_names())  # a plugin uninstalled since offers nothing
    upgraded["outputs"] = collect_outputs(
        {name: table for name, table in offering.items() if name in known}
    )
    upgraded["schema"] = PLAN_SCHEMA
    return RunPlan.from_json(upgraded)
