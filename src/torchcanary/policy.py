"""The go / no-go decision: each section states its objections under one policy.

The policy is a flat table of thresholds. Each registered section declares the keys it
reads, with their defaults, as ``policy_defaults`` (built-in sections keep them in
``POLICY_DEFAULTS`` of their ``section`` module, whose docstring documents the same
keys). A policy file (TOML, keys at the top level or under ``[policy]``) overrides them.
An unknown key is a configuration error rather than a silent no-op; a key of a section
that this run leaves out is accepted, so one team policy file serves every subcommand.

One rule belongs to no section: a run that did not do what was asked never answers go.
Each section plans its units before it runs; every planned unit that ended without a
checked verdict (``accounting.unchecked_units``) objects, unless ``block_on_not_run =
false`` turns them into warnings, and then the decision reads "go with N units not
checked", never a bare go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.accounting import NO_VERDICT, UncheckedUnit, unchecked_units
from torchcanary.config_toml import tomllib
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.section_types import PlannedUnit, PolicyBounds, RunView
from torchcanary.sections import get_section, load_plan, section_names

# The keys of the rules the core applies to every section.
CORE_POLICY_DEFAULTS: dict[str, Any] = {"block_on_not_run": True}
SHOWN_UNITS = 10  # unchecked units named in the decision's line, per section
# Keys a section once read whose rule the core now applies: refused with the new name.
RETIRED_POLICY_KEYS: dict[str, str] = {
    "bench_block_on_candidate_failure": "block_on_not_run",
    "stack_block_on_no_comparison": "block_on_not_run",
}


@dataclass(frozen=True)
class Decision:
    """Go or no-go with the reasons; ``warnings`` are objections the policy let through."""

    go: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    not_checked: int = 0  # planned units without a checked verdict, blocking or not

    @property
    def label(self) -> str:
        return "go" if self.go else "no-go"

    @property
    def headline(self) -> str:
        """The decision as a report's first line says it (see :func:`headline`)."""
        return headline(self.label, self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.label,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "not_checked": self.not_checked,
        }


def headline(label: str | None, detail: Mapping[str, Any] | None) -> str:
    """A stored decision in the words of a report's first line: a go that let unchecked
    units through says how many, never a bare go."""
    if label is None:
        return "incomplete"
    count = int((detail or {}).get("not_checked", 0))
    if label == "go" and count:
        return f"go with {count} unit{'s' if count != 1 else ''} not checked"
    return label


def policy_defaults(sections: tuple[str, ...]) -> dict[str, Any]:
    """The policy keys ``sections`` read, with their defaults."""
    defaults: dict[str, Any] = {}
    for section in sections:
        defaults.update(get_section(section).policy_defaults)
    return defaults


def _choices(sections: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    choices: dict[str, tuple[str, ...]] = {}
    for section in sections:
        choices.update(get_section(section).policy_choices)
    return choices


def _bounds(sections: tuple[str, ...]) -> dict[str, PolicyBounds]:
    bounds: dict[str, PolicyBounds] = {}
    for section in sections:
        bounds.update(get_section(section).policy_bounds)
    return bounds


def _check_bounds(key: str, value: float, bounds: PolicyBounds) -> None:
    """A number outside what ``key`` declares is a ConfigError naming the range to use."""
    if not bounds.admits(value):
        meaning = f" ({bounds.meaning})" if bounds.meaning else ""
        raise ConfigError(
            f"policy key {key!r} = {value!r} is out of bounds: use a number "
            f"{bounds.describe()}{meaning}"
        )


def _check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    """A word (or each word of a list) outside what ``key`` allows is a ConfigError."""
    for word in value if isinstance(value, list) else [value]:
        if word not in allowed:
            raise ConfigError(
                f"policy key {key!r}: {word!r} is not one of {', '.join(map(repr, allowed))}"
            )


def resolve_policy(overrides: dict[str, Any], sections: tuple[str, ...]) -> dict[str, Any]:
    """The policy of a run over ``sections``: defaults with ``overrides`` applied.

    Keys unknown to every section, values of the wrong type, words a key does not allow and
    numbers outside a key's declared bounds are refused; overrides for sections this run
    leaves out are checked the same way, then left out.
    """
    resolved = CORE_POLICY_DEFAULTS | policy_defaults(sections)
    # Other sections are imported only when the file names keys beyond this run's.
    others = set(overrides) - set(resolved)
    known = resolved | (policy_defaults(section_names()) if others else {})
    choices = _choices(section_names() if others else sections)
    bounds = _bounds(section_names() if others else sections)
    for key, value in overrides.items():
        if key in RETIRED_POLICY_KEYS:
            raise ConfigError(
                f"policy key {key!r} is retired: its rule now applies to every section; "
                f"use {RETIRED_POLICY_KEYS[key]!r} (true blocks, false warns)"
            )
        if key not in known:
            raise ConfigError(f"unknown policy key {key!r}; known keys: {', '.join(sorted(known))}")
        expected = type(known[key])
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(f"policy key {key!r} must be a {expected.__name__}, not {value!r}")
        if key in choices:
            _check_choice(key, value, choices[key])
        if key in bounds:
            _check_bounds(key, value, bounds[key])
        if key in resolved:
            resolved[key] = value
    return resolved


def load_policy_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"policy file {path} does not exist; check --policy") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policy file {path} is not valid TOML: {exc}") from None
    table = data.get("policy", data)
    if not isinstance(table, dict):
        raise ConfigError(f"policy file {path}: [policy] must be a table")
    return dict(table)


def decide(
    view: RunView,
    policy: dict[str, Any],
    sections: tuple[str, ...],
    section_failures: dict[str, str],
    plan: RunPlan | None = None,
    planned: Mapping[str, list[PlannedUnit]] | None = None,
) -> Decision:
    """Go only when every asked-for section checked every unit it planned and none objects
    under ``policy``. The units are ``planned`` (a venue's own), else those the run declared
    before it started, else read from ``plan`` (default: the run's stored plan; a fleet
    profile's is the plan fitted to its hardware)."""
    declared = planned if planned is not None else view.planned if plan is None else None
    plan = plan or load_plan(view.run.plan)
    reasons: list[str] = []
    unchecked: list[str] = []
    count = 0
    for section in sections:
        units = (declared or {}).get(section)
        try:
            units = get_section(section).planned_units(plan) if units is None else units
        except Exception as exc:  # its plan cannot be read: nothing of it is accounted for
            reasons.append(
                f"section {section}: its planned units cannot be read: {type(exc).__name__}: {exc}"
            )
            units = []
        found = _unchecked(section, units, view)
        count += len(found)
        unchecked += [_unchecked_line(section, found)] if found else []
        if section in section_failures:
            reasons.append(f"section {section} could not finish: {section_failures[section]}")
            continue
        # nothing judged is not the same as no objection
        if not get_section(section).has_results(view):
            reasons.append(f"section {section} was asked for but stored no results")
            continue
        try:
            reasons += get_section(section).blocking_reasons(view, policy)
        except Exception as exc:  # its own code broke: what it found cannot be judged
            reasons.append(
                f"section {section} could not judge its results: {type(exc).__name__}: {exc}"
            )
    return undone_work(reasons, unchecked, count, policy)


def undone_work(
    reasons: list[str],
    unchecked: list[str],
    count: int,
    policy: Mapping[str, Any],
    warnings: tuple[str, ...] = (),
) -> Decision:
    """The decision once ``count`` planned units without a checked verdict (``unchecked``:
    lines naming them) are weighed: they block unless ``block_on_not_run = false`` makes
    each line a warning, and then the decision counts them (its headline says so)."""
    blocks = policy.get("block_on_not_run", CORE_POLICY_DEFAULTS["block_on_not_run"])
    if blocks:
        reasons = [*reasons, *unchecked]
    else:
        warnings = (
            *warnings,
            *(f"{line} (not blocking: block_on_not_run = false)" for line in unchecked),
        )
    return Decision(not reasons, tuple(reasons), tuple(warnings), count)


def _unchecked(section: str, units: list[PlannedUnit], view: RunView) -> list[UncheckedUnit]:
    """``section``'s ``units`` without a checked verdict in ``view``; all of them where its
    stored results cannot be read (rows it cannot read checked nothing)."""
    try:
        return unchecked_units(get_section(section), units, view)
    except Exception as exc:
        why = f"its stored results cannot be read: {type(exc).__name__}: {exc}"
        return [UncheckedUnit(unit, NO_VERDICT, why) for unit in dict.fromkeys(units)]


def _unchecked_line(section: str, found: list[UncheckedUnit]) -> str:
    """One line naming ``section``'s planned units without a checked verdict."""
    shown = "; ".join(unit.describe() for unit in found[:SHOWN_UNITS])
    more = f"; and {len(found) - SHOWN_UNITS} more" if len(found) > SHOWN_UNITS else ""
    return (
        f"section {section}: {len(found)} planned unit(s) not checked, so they say nothing "
        f"about the candidate: {shown}{more}"
    )
