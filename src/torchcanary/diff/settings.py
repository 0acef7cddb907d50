"""The ``[tool.torchcanary.diff]`` table (and ``torchcanary diff`` flags), validated.

Keys (defaults in ``DiffSettings``):
  code        a directory or file of the user's Python sources to scan for changed names
              (empty: the stack's project directory when a stack command is configured,
              otherwise no scan)
  notes       release-notes files whose text, with the claims pack, decides "announced"
  namespaces  public namespaces whose API is compared (empty: the worker's default list)
  timeout_s   deadline for collecting one environment's surface
  budget_s    after this many seconds a worker takes on no further namespace
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary import settings_checks
from torchcanary.errors import ConfigError

_SECTION = "diff"


@dataclass(frozen=True)
class DiffSettings:
    code: str = ""
    notes: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    timeout_s: float = 300.0
    budget_s: float = 50.0

    def to_json(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DiffSettings:
        values = dict(data)
        for name in ("notes", "namespaces"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


def _existing(key: str, value: Any, base_dir: Path, want_file: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"diff.{key} must be a path")
    path = (base_dir / value).expanduser().resolve()
    exists = path.is_file() if want_file else path.exists()
    if not exists:
        raise ConfigError(
            f"diff.{key}: {path} does not exist; give "
            + ("a notes file" if want_file else "your project's directory or a .py file")
        )
    return str(path)


def parse_settings(mapping: Mapping[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """Validate the diff table; paths become absolute (relative to ``base_dir``)."""
    base = Path(base_dir or Path.cwd())
    known = {f.name for f in dataclasses.fields(DiffSettings)}
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigError(f"unknown key diff.{unknown[0]}; known keys: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, value in mapping.items():
        if key == "code":
            values[key] = _existing(key, value, base, want_file=False)
        elif key == "notes":
            notes = settings_checks.strings(
                _SECTION, key, value, example='["RELEASE_NOTES.md"]', one_is_a_list=True
            )
            values[key] = tuple(_existing(key, v, base, want_file=True) for v in notes)
        elif key == "namespaces":
            values[key] = settings_checks.strings(
                _SECTION, key, value, example='["torch.nn"]', one_is_a_list=True
            )
        else:
            values[key] = settings_checks.number(
                _SECTION, key, value, above=0, fix=f"give {key} in seconds, e.g. {key} = 60"
            )
    return DiffSettings(**values).to_json()
