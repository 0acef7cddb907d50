"""Reads ``[tool.torchcanary]`` in pyproject.toml or a ``canary.toml`` and merges CLI flags.

Every key is checked before anything runs: an unknown key, a wrong type or a bad value is
one ConfigError naming the file, the key and the fix. Flags win over files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.config_toml import tomllib
from torchcanary.envs.spec import parse_env_spec
from torchcanary.errors import ConfigError
from torchcanary.plan import (
    COMPANION_MODES,
    DEFAULT_BASELINE,
    DEFAULT_CANDIDATE,
    INSTALLERS,
    RunPlan,
)
from torchcanary.policy import load_policy_file, resolve_policy
from torchcanary.sections import collect_outputs, get_section, section_names, settings_owners
from torchcanary.store.location import store_location

if TYPE_CHECKING:
    from torchcanary.fleet.slurm_site import SlurmSite

DEFAULTS_BY_ROLE = {"baseline": DEFAULT_BASELINE, "candidate": DEFAULT_CANDIDATE}
DEFAULT_STORE = "canary-results/canary.db"
DEFAULT_OUTPUT = "canary-results"

_TOP_LEVEL_TYPES: dict[str, type | tuple[type, ...]] = {
    "baseline": str,
    "candidate": str,
    "sections": list,
    "installer": str,
    "companions": str,
    "store": str,
    "output": str,
    "policy": dict,
    "policy_file": str,
    "fleet": dict,
}


@dataclass(frozen=True)
class Settings:
    """A validated configuration: the plan plus where results go.

    ``left_out`` holds the default sections that cannot run as configured (a stack without
    a command), with why; the plan does not list them, so the decision never counts them.
    """

    plan: RunPlan
    store: Path | str  # a SQLite file, or a postgresql:// URL (which may hold a password)
    output: Path
    source: str = "defaults"
    left_out: dict[str, str] = field(default_factory=dict)
    # The [fleet.slurm] table's site flags; None when the file has none.
    slurm_site: SlurmSite | None = None


def find_config_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """``canary.toml`` first, then a pyproject.toml that has ``[tool.torchcanary]``."""
    canary = start / "canary.toml"
    if canary.is_file():
        return canary, _read_toml(canary)
    pyproject = start / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject).get("tool", {}).get("torchcanary")
        if table is not None:
            return pyproject, table
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _config_table(config_path: Path | None, cwd: Path) -> tuple[str, dict[str, Any]]:
    """The config file's table and where it came from (explicit path, or found in ``cwd``)."""
    if config_path is not None:
        if not config_path.is_file():
            raise ConfigError(f"config file {config_path} does not exist; check --config")
        table = _read_toml(config_path)
        if config_path.name == "pyproject.toml":
            table = table.get("tool", {}).get("torchcanary", {})
        return str(config_path), table
    found = find_config_file(cwd)
    return (str(found[0]), found[1]) if found else ("defaults", {})


def load_settings(config_path: Path | None, flags: dict[str, Any], cwd: Path) -> Settings:
    """Merge the config file (explicit path, or found in ``cwd``) with CLI ``flags``."""
    source, table = _config_table(config_path, cwd)
    return _build(table, {k: v for k, v in flags.items() if v is not None}, source, cwd)


def result_paths(
    config_path: Path | None, flags: dict[str, Any], cwd: Path
) -> tuple[Path | str, Path]:
    """The store and the report directory for commands that read results (runs, report).

    Flags win over the config file's ``store`` and ``output``. Only those two keys are
    checked here, so a config being edited for the next run does not hide the last one.
    """
    source, table = _config_table(config_path, cwd)
    for key in ("store", "output"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{source}: key {key!r} has the wrong type ({table[key]!r})")
    return _locations(table | {k: v for k, v in flags.items() if v is not None}, cwd)


def _locations(merged: dict[str, Any], cwd: Path) -> tuple[Path | str, Path]:
    """A store path is relative to ``cwd``; a PostgreSQL URL is kept (as psycopg spells it)."""
    store = store_location(merged.get("store", DEFAULT_STORE), cwd)
    output = (cwd / merged.get("output", DEFAULT_OUTPUT)).expanduser()
    return store, output


def _parsed_tables(
    raw_tables: dict[str, dict[str, Any]], sections: tuple[str, ...], given: set[str]
) -> dict[str, dict[str, Any]]:
    """The settings of each section of the run, in run order, then of each other section
    whose table or flags the user gives (``given``): they are meant for this project, so
    the section offers its outputs even when it does not run itself (``run --only
    diff,calls --workload X``: the bench's workload is recorded, not timed; ``torchcanary
    diff`` with ``[claims] probe_modules``: the diff reads those probes' claims too). A bad
    table is a ConfigError."""
    wanted = [*sections, *(name for name in raw_tables if name in given and name not in sections)]
    return {name: get_section(name).parse_settings(dict(raw_tables[name])) for name in wanted}


def _unknown_key(source: str, key: str, known_sections: tuple[str, ...]) -> ConfigError:
    """An unknown top-level key, with the fix: the table it belongs in, where a section's
    settings have it (``probes``, ``release``, ... moved under ``[claims]``)."""
    owners = settings_owners([key])[key]
    if owners:
        tables = " or ".join(f"[{name}]" for name in owners)
        return ConfigError(
            f"{source}: `{key}` is a {', '.join(owners)} setting: move it under {tables}"
        )
    return ConfigError(
        f"{source}: unknown key {key!r}; known keys: "
        f"{', '.join(sorted([*_TOP_LEVEL_TYPES, *known_sections]))}"
    )


def _section_settings(
    parsed: dict[str, dict[str, Any]],
    sections: tuple[str, ...],
    named: set[str],
    outputs: Mapping[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each section's validated settings, in run order, and the default sections left out.

    A section that lacks what it needs (and is not fed by the others' ``outputs``) is a
    usage error when the user named it, and is left out with a note when it was only a
    default; a plan with nothing left is refused.
    """
    settings, left_out = {}, {}
    for name in sections:
        section = get_section(name)
        missing = section.missing_input(parsed[name])
        if missing and section.fed_by(outputs):
            missing = None
        if missing and name in named:
            raise ConfigError(missing[0])
        if missing:
            left_out[name] = missing[1]
        else:
            settings[name] = parsed[name]
    if not settings:
        why = "".join(f" ({name}: {note})" for name, note in left_out.items())
        raise ConfigError(
            f"no section left to run{why}; choose from {', '.join(section_names())} with --only"
        )
    return settings, left_out


def _build(table: dict[str, Any], flags: dict[str, Any], source: str, cwd: Path) -> Settings:
    known_sections = section_names()
    section_tables = {name: table.get(name, {}) for name in known_sections}
    for key, value in table.items():
        if key in known_sections:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: [{key}] must be a table")
            continue
        if key not in _TOP_LEVEL_TYPES:
            raise _unknown_key(source, key, known_sections)
        if not isinstance(value, _TOP_LEVEL_TYPES[key]):
            raise ConfigError(f"{source}: key {key!r} has the wrong type ({value!r})")
    merged = table | flags
    for role in ("baseline", "candidate"):
        parse_env_spec(str(merged.get(role, DEFAULTS_BY_ROLE[role])))  # refuse bad specs now
    sections = tuple(merged.get("sections", known_sections))
    unknown = [s for s in sections if s not in known_sections]
    if unknown:
        choices = ", ".join(known_sections)
        raise ConfigError(f"unknown section {unknown[0]!r}; choose from {choices}")
    installer = merged.get("installer", "auto")
    if installer not in INSTALLERS:
        raise ConfigError(
            f"installer must be one of {', '.join(INSTALLERS)}, not {installer!r}: "
            "auto uses uv where it is installed, else pip"
        )
    companions = merged.get("companions", "as-given")
    if companions not in COMPANION_MODES:
        raise ConfigError(
            f"companions must be one of {', '.join(COMPANION_MODES)}, not {companions!r}: "
            "auto pairs torchvision and the rest of the torch family with each side's torch"
        )
    # Named: on the command line (subcommand, --only, --stack) or in the file's `sections`.
    named = set(flags.get("named_sections", ()))
    if "sections" not in flags:
        named |= set(table.get("sections", ()))
    overrides = flags.get("section_overrides", {})
    raw_tables = {
        name: section_tables.get(name, {}) | overrides.get(name, {}) for name in known_sections
    }
    given = {name for name, flags_given in overrides.items() if flags_given}
    given |= {name for name in known_sections if name in table}
    parsed = _parsed_tables(raw_tables, sections, given)
    outputs = collect_outputs(parsed)
    section_settings, left_out = _section_settings(parsed, sections, named, outputs)
    sections = tuple(section_settings)
    policy_overrides: dict[str, Any] = {}
    if "policy_file" in merged:
        policy_overrides |= load_policy_file((cwd / merged["policy_file"]).expanduser())
    policy_overrides |= dict(table.get("policy", {}))
    plan = RunPlan(
        baseline=str(merged.get("baseline", DEFAULT_BASELINE)),
        candidate=str(merged.get("candidate", DEFAULT_CANDIDATE)),
        sections=sections,
        installer=installer,
        companions=companions,
        policy=resolve_policy(policy_overrides, sections),
        settings=section_settings,
        outputs=outputs,
    )
    for name in sections:  # e.g. a bad claims pack: refused before anything is built
        get_section(name).check_plan(plan)
    store, output = _locations(merged, cwd)
    return Settings(plan, store, output, source, left_out, _slurm_site(table, source))


def _slurm_site(table: Mapping[str, Any], source: str) -> SlurmSite | None:
    """The ``[fleet.slurm]`` table's site flags, checked now; the Slurm module is imported
    only when the file has the table."""
    fleet = table.get("fleet", {})
    unknown = sorted(set(fleet) - {"slurm"})
    if unknown:
        raise ConfigError(f"{source}: unknown table [fleet.{unknown[0]}]; known: [fleet.slurm]")
    if "slurm" not in fleet:
        return None
    if not isinstance(fleet["slurm"], dict):
        raise ConfigError(f"{source}: [fleet.slurm] must be a table")
    from torchcanary.fleet.slurm_site import parse_site

    return parse_site(fleet["slurm"], source=source)
