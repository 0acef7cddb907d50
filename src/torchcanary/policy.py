"""The go / no-go decision: each section states its objections under one policy.

The policy is a flat table of thresholds. Each registered section declares the keys it
reads, with their defaults, as ``policy_defaults`` (built-in sections keep them in
``POLICY_DEFAULTS`` of their ``section`` module, whose docstring documents the same
keys). A policy file (TOML, keys at the top level or under ``[policy]``) overrides them.
An unknown key is a configuration error rather than a silent no-op; a key of a section
that this run leaves out is accepted, so one team policy file serves every subcommand.

One rule belongs to no section: a run that did not do what was asked never answers go.
Items a section declares it did not run in the candidate (``Section.not_run``) object,
unless ``block_on_not_run = false`` turns them into warnings, which the reports still show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.config_toml import tomllib
from torchcanary.errors import ConfigError
from torchcanary.section_types import PolicyBounds, RunView
from torchcanary.sections import (
    get_section,
    items_not_run,
    policy_bounds,
    policy_choices,
    section_names,
)

# The keys of the rules the core applies to every section.
CORE_POLICY_DEFAULTS: dict[str, Any] = {"block_on_not_run": True}
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

    @property
    def label(self) -> str:
        return "go" if self.go else "no-go"

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.label,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
        }


def policy_defaults(sections: tuple[str, ...]) -> dict[str, Any]:
    """The policy keys ``sections`` read, with their defaults."""
    defaults: dict[str, Any] = {}
    for section in sections:
        defaults.update(get_section(section).policy_defaults)
    return defaults


def _choices(sections: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    choices: dict[str, tuple[str, ...]] = {}
    for section in sections:
        choices.update(policy_choices(get_section(section)))
    return choices


def _bounds(sections: tuple[str, ...]) -> dict[str, PolicyBounds]:
    bounds: dict[str, PolicyBounds] = {}
    for section in sections:
        bounds.update(policy_bounds(get_section(section)))
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
) -> Decision:
    """Go only when every asked-for section ran all its items and none objects under ``policy``."""
    reasons: list[str] = []
    warnings: list[str] = []
    for section in sections:
        if section in section_failures:
            reasons.append(f"section {section} could not finish: {section_failures[section]}")
            continue
        # nothing judged is not the same as no objection
        if not get_section(section).has_results(view):
            reasons.append(f"section {section} was asked for but stored no results")
            continue
        reasons += get_section(section).blocking_reasons(view, policy)
        not_run = _not_run_reason(section, view)
        if not_run and policy.get("block_on_not_run", CORE_POLICY_DEFAULTS["block_on_not_run"]):
            reasons.append(not_run)
        elif not_run:
            warnings.append(f"{not_run} (not blocking: block_on_not_run = false)")
    return Decision(not reasons, tuple(reasons), tuple(warnings))


def _not_run_reason(section: str, view: RunView) -> str:
    """One line naming ``section``'s items that did not run in the candidate ('' if none)."""
    missing = items_not_run(get_section(section), view)
    if not missing:
        return ""
    shown = "; ".join(item.describe() for item in missing[:3])
    more = f"; and {len(missing) - 3} more" if len(missing) > 3 else ""
    return (
        f"section {section}: {len(missing)} item(s) did not run in the candidate, so they say "
        f"nothing about it: {shown}{more}"
    )
