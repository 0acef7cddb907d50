"""The user's command's table (``[tool.torchcanary.stack]``, and the calls' table, which takes
the same keys), validated; its flags are ``flags.py``.

Keys (defaults in ``CommandSettings``):
  command           the command to run in both environments, e.g. "pytest tests/" (required
                    when the stack is asked for by name); ``pytest``/``python -m pytest``
                    gets per-test results, anything else is compared by exit code, time
                    and output
  with              extra requirements for both environments, e.g. ["-e .", "pytest-xdist"]
  requirements      requirements files (relative to ``cwd``)
  cwd               the working directory for installs and the command (default ".")
  env               extra environment variables for the command
  timeout_s         deadline per command run; install_timeout_s per install
  test_timeout_s    deadline per pytest test (0: none); pytest starts again after a hung
                    or crashing test, for the tests it had not reached
  reruns            re-runs per environment of what broke (and of timing suspects)
  seed, threads     TORCHCANARY_SEED and OMP/MKL thread counts, the same in both
  slower_ratio, timing_min_s, timing_max_tests   what counts as slower or faster
  warning_kinds     which new warnings are findings: deprecation, user, other
  numerics_rtol, numerics_atol, numerics_max_ulps   tolerance overrides for recorded tensors
  output_tail_kib, log_limit_mib   how much output is kept in memory and on disk
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary import settings_checks
from torchcanary.errors import ConfigError

_WARNING_KINDS = ("deprecation", "user", "other")


@dataclass(frozen=True)
class CommandSettings:
    command: str = ""
    with_: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    cwd: str = "."
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 3600.0
    test_timeout_s: float = 600.0
    install_timeout_s: float = 900.0
    reruns: int = 3
    seed: int = 0
    threads: int = 1
    slower_ratio: float = 1.5
    timing_min_s: float = 0.1
    timing_max_tests: int = 20
    warning_kinds: tuple[str, ...] = ("deprecation", "user")
    numerics_rtol: float | None = None
    numerics_atol: float | None = None
    numerics_max_ulps: int | None = None
    output_tail_kib: int = 64
    log_limit_mib: int = 16

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["with"] = list(data.pop("with_"))
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommandSettings:
        values = {("with_" if k == "with" else k): v for k, v in data.items()}
        for name in ("with_", "requirements", "warning_kinds"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


_NUMBERS: dict[str, tuple[type, float | None]] = {
    # name: (type, smallest allowed value)
    "timeout_s": (float, 1.0),
    "test_timeout_s": (float, 0.0),
    "install_timeout_s": (float, 1.0),
    "reruns": (int, 0),
    "seed": (int, None),
    "threads": (int, 1),
    "slower_ratio": (float, 1.0),
    "timing_min_s": (float, 0.0),
    "timing_max_tests": (int, 0),
    "numerics_rtol": (float, 0.0),
    "numerics_atol": (float, 0.0),
    "numerics_max_ulps": (int, 0),
    "output_tail_kib": (int, 1),
    "log_limit_mib": (int, 1),
}


def parse_settings(
    mapping: Mapping[str, Any], base_dir: Path | None = None, *, table: str
) -> dict[str, Any]:
    """Validate the command's keys; ``cwd`` becomes absolute (relative to ``base_dir``).
    ``table``: the config table a refusal names."""
    known = {f.name for f in dataclasses.fields(CommandSettings)} - {"with_"} | {"with"}
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigError(
            f"unknown key {table}.{unknown[0]}; known keys: {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in mapping.items():
        if key == "command":
            if not isinstance(value, str):
                raise ConfigError(f'{table}.command must be a string such as "pytest tests/"')
            try:
                shlex.split(value)
            except ValueError as exc:
                raise ConfigError(
                    f"{table}.command {value!r} cannot be split: {exc}; check its quotes"
                ) from exc
            values["command"] = value.strip()
        elif key in ("with", "requirements"):
            values["with_" if key == "with" else key] = settings_checks.strings(
                table, key, value, example='["-e ."]', one_is_a_list=True
            )
        elif key == "warning_kinds":
            kinds = settings_checks.strings(
                table, key, value, example='["deprecation"]', one_is_a_list=True
            )
            bad = [k for k in kinds if k not in _WARNING_KINDS]
            if bad:
                raise ConfigError(
                    f"{table}.warning_kinds: {bad[0]!r} is not one of {', '.join(_WARNING_KINDS)}"
                )
            values[key] = kinds
        elif key == "env":
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ConfigError(
                    f"{table}.env must be a table of strings, e.g. "
                    'env = { EINOPS_TEST_BACKENDS = "torch" }'
                )
            values[key] = dict(value)
        elif key == "cwd":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{table}.cwd must be a directory path")
            values[key] = value
        elif value is None and key.startswith("numerics_"):
            values[key] = None  # no override: the recorded tensor's own tolerance
        else:
            kind, smallest = _NUMBERS[key]
            values[key] = settings_checks.number(
                table, key, value, integer=kind is int, low=smallest
            )
    values["cwd"] = _project_dir(values, base_dir, table)
    return CommandSettings(**values).to_json()


def _project_dir(values: dict[str, Any], base_dir: Path | None, table: str) -> str:
    """``cwd`` made absolute, checked to be a directory holding the requirements files."""
    cwd = (Path(base_dir or Path.cwd()) / values.get("cwd", ".")).resolve()
    if not cwd.is_dir():
        raise ConfigError(f"{table}.cwd {cwd} is not a directory; give the project's directory")
    for requirement_file in values.get("requirements", ()):
        if not (cwd / requirement_file).is_file():
            raise ConfigError(
                f"{table} requirements file {cwd / requirement_file} does not "
                f"exist; give a path relative to {table}.cwd"
            )
    return str(cwd)
