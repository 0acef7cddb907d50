"""The calls section's settings: the user's command's (command, --with, env, cwd, ...), read
by ``user_command/settings.py`` as the stack reads them, plus what only the calls need: the
workloads to record (the bench's workload specs, read by ``workload_spec.py``) and the
replay's own keys."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from torchcanary import settings_checks
from torchcanary.errors import ConfigError
from torchcanary.user_command import settings as command_settings
from torchcanary.user_command.settings import CommandSettings
from torchcanary.worker.bench.specs import WORKLOAD
from torchcanary.workload_spec import parse_workload

_OWN = ("candidate_env", "replay_timeout_s", "workloads", "quiet_calls")
_COMMAND_TABLE = "stack"  # the table whose command keys these are, and the flags'


@dataclass(frozen=True)
class CallsSettings:
    """``candidate_env``: variables given to the candidate's replay only (to reproduce a
    setting your deployment gives the new version); ``replay_timeout_s``: per call;
    ``workloads``: bench workload specs whose calls are recorded too (``[calls] workloads``;
    the bench's own, ``--workload`` among them, arrive as its output ``workloads``);
    ``quiet_calls``: how many calls in a row that meet no new group let the recorder rest (0:
    examine every call, at several times the suite's time; None: the recorder's own
    ``QUIET``)."""

    user_command: CommandSettings
    candidate_env: dict[str, str] = field(default_factory=dict)
    replay_timeout_s: float = 60.0
    workloads: tuple[dict[str, Any], ...] = ()
    quiet_calls: int | None = None

    def user_code(self) -> dict[str, list[str]]:
        """Where the user's own code lies, for a recorded call's site
        (``TORCHCANARY_USER_CODE``, read by ``worker/replay/user_code.py``): the suite's
        folder (``cwd``) and what ``--with`` names, local paths (relative to ``cwd``) and
        distribution names alike (tools among them, such as pytest, call no torch)."""
        cwd = Path(self.user_command.cwd)
        paths, names = [str(cwd.resolve())], []
        for token in (t for entry in self.user_command.with_ for t in entry.split()):
            if token.startswith("-") or ("://" in token and not token.startswith("file:")):
                continue  # an option, or a remote URL whose project is not named
            if token.startswith(("file:", ".", "/", "~")) or (cwd / token).exists():
                local = unquote(urlparse(token).path) if token.startswith("file:") else token
                paths.append(str((cwd / Path(local).expanduser()).resolve()))
            else:
                names.append(re.split(r"[\[<>=!~;@ ]", token, maxsplit=1)[0])
        return {"paths": list(dict.fromkeys(paths)), "names": [name for name in names if name]}

    @classmethod
    def parse(cls, mapping: Mapping[str, Any]) -> CallsSettings:
        command_part = {k: v for k, v in mapping.items() if k not in _OWN}
        # Refused in the stack's words, as the stack's keys always were.
        parsed = CommandSettings.from_json(
            command_settings.parse_settings(command_part, table=_COMMAND_TABLE)
        )
        env = mapping.get("candidate_env", {})
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError(
                'calls.candidate_env must be a table of strings, e.g. { MY_FLAG = "1" }'
            )
        timeout = settings_checks.number(
            "calls", "replay_timeout_s", mapping.get("replay_timeout_s", 60.0), low=1
        )
        quiet = mapping.get("quiet_calls")
        if quiet is not None:
            quiet = settings_checks.number("calls", "quiet_calls", quiet, integer=True, low=0)
        return cls(parsed, dict(env), float(timeout), workloads(mapping, parsed.cwd), quiet)

    def own_json(self) -> dict[str, Any]:
        return {
            "candidate_env": dict(self.candidate_env),
            "replay_timeout_s": self.replay_timeout_s,
            "workloads": [dict(spec) for spec in self.workloads],
            "quiet_calls": self.quiet_calls,
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.user_command.to_json(), **self.own_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallsSettings:
        command_part = {k: v for k, v in data.items() if k not in _OWN}
        return cls(
            CommandSettings.from_json(command_part),
            dict(data.get("candidate_env", {})),
            float(data.get("replay_timeout_s", 60.0)),
            tuple(dict(spec) for spec in data.get("workloads", ())),
            data.get("quiet_calls"),
        )


def workloads(mapping: Mapping[str, Any], cwd: str) -> tuple[dict[str, Any], ...]:
    """``workloads``: targets (``"pkg.mod:fn"``, ``"file.py:fn"``) or workload tables, as
    the bench validates them (a file target made absolute against ``cwd``)."""
    value = mapping.get("workloads", [])
    if not isinstance(value, list | tuple):
        raise ConfigError('calls.workloads must be a list, e.g. ["myproject.bench:step"]')
    specs = []
    for item in value:
        table = {"target": item} if isinstance(item, str) else item
        if not isinstance(table, Mapping):
            raise ConfigError(f"calls.workloads: {item!r} is not a target or a workload table")
        # Refused in the bench's words: the same spec as a bench workload's.
        specs.append(parse_workload({"kind": WORKLOAD, **table}, cwd, section="bench"))
    return tuple(specs)
