"""A site's own sbatch flags: the ``[fleet.slurm]`` table and ``--slurm-args``.

A production cluster wants a time limit, an account, a QoS, a reservation, memory or a
whole node (``--exclusive``) on every job; without them a job gets the partition's
defaults, or is refused. The table's keys are typed and checked here, one ConfigError line
each; ``extra`` (in the table) and ``--slurm-args`` (on the command line) add flags as the
site writes them, except those torchcanary sets itself. Every job and step the Slurm
executor starts carries them (``SlurmExecutor``), and the run's fleet record shows them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchcanary.errors import ConfigError

# sbatch's --time forms: MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED.
_TIME = re.compile(r"^(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$", re.I)
_MEM = re.compile(r"^\d+[KMGT]?$", re.I)
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_TEXT_KEYS = ("time", "account", "qos", "reservation", "mem")
_KEYS = (*_TEXT_KEYS, "exclusive", "extra", "lost_after_s")
# A running unit whose heartbeat stops for this long is lost (its node hung or lost power):
# well under Slurm's SlurmdTimeout (300 s by default), after which Slurm would say so.
LOST_AFTER_S = 60.0
# Flags torchcanary sets on every job (where it runs, what it runs, what it inherits,
# where its output goes): a site flag may not change them.
_OWN_FLAGS = {
    "-p", "--partition", "-w", "--nodelist", "-x", "--exclude", "-C", "--constraint",
    "-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node", "-c", "--cpus-per-task",
    "--gres", "--gpus", "-G", "--export", "-J", "--job-name", "-o", "--output",
    "-e", "--error", "--wrap", "--parsable", "-d", "--dependency", "--requeue",
    "--no-requeue", "-D", "--chdir",
}  # fmt: skip


@dataclass(frozen=True)
class SlurmSite:
    """The site flags every job carries; empty: the partition's defaults."""

    time: str = ""
    account: str = ""
    qos: str = ""
    reservation: str = ""
    mem: str = ""
    exclusive: bool = False
    extra: tuple[str, ...] = ()
    lost_after_s: float = LOST_AFTER_S  # not a flag: the driver's own bound

    def flags(self) -> list[str]:
        """The flags as sbatch and srun take them."""
        named = [f"--{key}={value}" for key in _TEXT_KEYS if (value := getattr(self, key))]
        return [*named, *(["--exclusive"] if self.exclusive else []), *self.extra]

    @property
    def sets_time(self) -> bool:
        """Whether the site gives the time limit (``time``, or ``--time``/``-t`` among its
        flags); else each unit's is derived (``unit_time.py``)."""
        return bool(self.time) or any(
            word.partition("=")[0] == "--time" or (word.startswith("-t") and word[:2] != "--")
            for word in self.extra
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SlurmSite:
        """The flags a run recorded (``to_json``), for its ``--resume``."""
        table = {key: data[key] for key in _KEYS if key in data and key != "extra"}
        return parse_site(table, shlex.join(data.get("extra", [])))

    def to_json(self) -> dict[str, Any]:
        """What the run's fleet record shows: each setting given, and the flags."""
        given = {key: getattr(self, key) for key in _KEYS if getattr(self, key)}
        return {
            **given,
            "extra": list(self.extra),
            "lost_after_s": self.lost_after_s,
            "flags": shlex.join(self.flags()),
        }


def parse_site(table: Mapping[str, Any], slurm_args: str = "", source: str = "") -> SlurmSite:
    """The site flags from a ``[fleet.slurm]`` table (``source`` names its file) and
    ``--slurm-args``; ConfigError in one line for an unknown key or a bad value."""
    where = f"{source}: [fleet.slurm]" if source else "[fleet.slurm]"
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(_KEYS)}")
    text = {key: _text(where, key, table.get(key, "")) for key in _TEXT_KEYS}
    if text["time"] and not _TIME.match(text["time"]):
        raise ConfigError(
            f"{where}: time {text['time']!r} is not a Slurm time; use MINUTES, HH:MM:SS "
            "or D-HH:MM:SS"
        )
    if text["mem"] and not _MEM.match(text["mem"]):
        raise ConfigError(f"{where}: mem {text['mem']!r} is not a size; use e.g. 64G or 500M")
    for key in ("account", "qos", "reservation"):
        if text[key] and not _NAME.match(text[key]):
            raise ConfigError(f"{where}: {key} {text[key]!r} is not a Slurm name")
    exclusive = table.get("exclusive", False)
    if not isinstance(exclusive, bool):
        raise ConfigError(f"{where}: exclusive must be true or false, not {exclusive!r}")
    extra = table.get("extra", "")
    if not isinstance(extra, str):
        raise ConfigError(f'{where}: extra must be one string of flags, e.g. "--comment=x"')
    flags = (
        *_split(f"{where}: extra", extra),
        *_split("--slurm-args", slurm_args),
    )
    lost_after_s = table.get("lost_after_s", LOST_AFTER_S)
    if isinstance(lost_after_s, bool) or not isinstance(lost_after_s, int | float):
        raise ConfigError(f"{where}: lost_after_s must be a number of seconds")
    if lost_after_s <= 0:
        raise ConfigError(f"{where}: lost_after_s must be above 0, not {lost_after_s}")
    return SlurmSite(**text, exclusive=exclusive, extra=flags, lost_after_s=float(lost_after_s))


def _text(where: str, key: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and key == "time":
        return str(value)  # minutes, as sbatch reads a bare number
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, not {value!r}")
    return value.strip()


def _split(what: str, flags: str) -> tuple[str, ...]:
    """``flags`` as the shell would split them; each a flag torchcanary does not own."""
    try:
        words = shlex.split(flags)
    except ValueError as exc:
        raise ConfigError(f"{what}: cannot split {flags!r} ({exc})") from None
    if words and not words[0].startswith("-"):
        raise ConfigError(f"{what}: {words[0]!r} is not a flag; give sbatch flags (--time=60)")
    for word in words:
        name = word.partition("=")[0]
        if name in _OWN_FLAGS or (
            name.startswith("-") and not name.startswith("--") and name[:2] in _OWN_FLAGS
        ):
            raise ConfigError(
                f"{what}: {name} is set by torchcanary on every job and cannot be given; "
                "choose nodes with --fleet slurm:PARTITION and --fleet-select"
            )
    return tuple(words)
