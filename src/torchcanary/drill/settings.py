"""The ``[tool.torchcanary.drill]`` table (and ``torchcanary drill`` flags), validated into
a typed ``DrillSettings``: its fields are the keys, each with its default and meaning.

The plan stores ``DrillSettings.to_json()``; the drill reads it back with ``from_json``.
Numbers, lists of strings and flags are checked by ``settings_checks`` (one error style for
every section); what is the drill's own (drill names, the job's shape, the user's job and
its folder) is checked here.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchcanary import settings_checks
from torchcanary.drill.catalog import DEFAULT_DRILLS, FULL_DRILLS, DrillSpec, parse_drill_name
from torchcanary.drill.repeats import MAX_TRIALS
from torchcanary.drill.user_job import DEFAULT_STEP_PATTERN, UserJob
from torchcanary.errors import ConfigError

SECTION = "drill"
MAX_RANKS = 4


@dataclass(frozen=True)
class DrillSettings:
    """What the drill section runs; the plan stores it as ``to_json()``."""

    ranks: int = 2
    """Ranks of the job, 2 to ``MAX_RANKS`` on one machine."""
    steps: int = 30
    """Training steps of the job, at least 4."""
    at_step: int = 12
    """The step after which the fault strikes, 1 to ``steps - 2``."""
    target_rank: int = 1
    """The rank the fault strikes."""
    timeout_s: float = 10.0
    """The process-group timeout."""
    ckpt_every: int = 5
    """Steps between checkpoints."""
    parallel: str = "ddp"
    """``ddp`` or ``fsdp`` (FSDP2 ``fully_shard``): the mode every drill runs, in place too."""
    step_pad_s: float = 0.05
    """Seconds each step of the built-in job is padded to, so a fault lands mid-run."""
    net_rate: str = "20mbit"
    """The tc rate of net-slow."""
    drill_timeout_s: float = 180.0
    """The bound on one drill."""
    seed: int = 0
    """The job's seed."""
    trials: int = 1
    """How many times each drill runs in each environment (``drill/repeats.py``)."""
    disagreement_trials: int = 3
    """Trials each environment gets when they disagree (one passed every trial, the other
    failed or errored in one); 1 to ``MAX_TRIALS`` like ``trials``."""
    job: str = ""
    """The user's job instead of the built-in tiny GPT: the script and its arguments
    (``{scratch}`` is a fresh folder per run; ``drill/user_job.py``)."""
    job_with: tuple[str, ...] = ()
    """Requirements installed over each environment before the job (``"-e ."``)."""
    job_step_pattern: str = DEFAULT_STEP_PATTERN
    """The regex (groups ``step``, ``loss``) of the job's printed step lines."""
    job_rtol: float | None = None
    """The relative tolerance of a non-deterministic job (None: deterministic)."""
    job_fault_after_s: float | None = None
    """When to strike a job that shows no steps (None: half the fault-free run or bound)."""
    job_cwd: str = ""
    """The folder the job starts in, absolute (empty: where torchcanary runs)."""
    job_env: dict[str, str] = field(default_factory=dict)
    """Variables the job is given."""
    job_fresh_reference: bool = False
    """Make the job's fault-free run again instead of reusing the one cached for this job,
    its files and environment (the built-in job's too: its key is the environment,
    torchcanary's files and the job's shape)."""
    faults: tuple[str, ...] = DEFAULT_DRILLS
    """The drills, ``"fault:recovery"``, in order (``"all"`` in the table: every one); the
    default takes both environments about 40 s on 2 cores, 50 s with the fault-free runs."""

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DrillSettings:
        values = dict(data)
        for name in ("job_with", "faults"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    def specs(self) -> list[DrillSpec]:
        """Each configured drill as it will run, in order."""
        shape = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(DrillSpec)
            if f.name not in ("fault", "recovery")
        }
        return [DrillSpec(*parse_drill_name(name), **shape) for name in self.faults]

    def user_job(self) -> UserJob | None:
        """The job the settings name, or None for the built-in tiny GPT."""
        if not self.job:
            return None
        return UserJob(
            argv=tuple(shlex.split(self.job)),
            with_=self.job_with,
            step_pattern=self.job_step_pattern,
            rtol=self.job_rtol,
            fault_after_s=self.job_fault_after_s,
            cwd=self.job_cwd or os.getcwd(),
            env=tuple(sorted(self.job_env.items())),
        )


_KEYS = tuple(f.name for f in dataclasses.fields(DrillSettings))
_INTEGERS = ("ranks", "steps", "at_step", "target_rank", "ckpt_every", "seed")
_SECONDS = ("timeout_s", "step_pad_s", "drill_timeout_s")
_LAUNCHERS = ("torchrun", "python", "python3", "env", "srun", "mpirun")
# Variables the drill or torchrun sets for each rank: a job_env entry may not replace them.
_OWNED_VARIABLES = frozenset(
    [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PYTHONHOME",
    ]
)
_OWNED_PREFIXES = ("TORCHCANARY_", "TORCHELASTIC_")


def _problem(message: str) -> ConfigError:
    return ConfigError(f"[tool.torchcanary.{SECTION}] {message}")


def _faults(value: Any) -> tuple[str, ...]:
    if value == "all":
        return FULL_DRILLS
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _problem(f'faults = {value!r}: give a list such as ["kill:restart"] or "all"')
    names: list[str] = []
    for name in value:
        try:
            fault, recovery = parse_drill_name(str(name))
        except ValueError as exc:
            raise _problem(f"faults: {exc}") from exc
        if f"{fault}:{recovery}" not in names:
            names.append(f"{fault}:{recovery}")
    if not names:
        raise _problem("faults = []: name at least one drill, or leave faults out")
    return tuple(names)


def parse_settings(mapping: Mapping[str, Any]) -> DrillSettings:
    """Validate the drill table and fill in defaults; ConfigError names problem and fix."""
    unknown = sorted(set(mapping) - set(_KEYS))
    if unknown:
        known = ", ".join(sorted(set(_KEYS) - {"faults"}))
        raise _problem(f"unknown key {unknown[0]!r}: known keys are faults, {known}")
    given = {**DrillSettings().to_json(), **mapping}
    values: dict[str, Any] = {"faults": _faults(given["faults"])}
    for key in _INTEGERS:
        values[key] = settings_checks.number(
            SECTION, key, given[key], integer=True, fix=f"give {key} as a whole number"
        )
    for key in ("trials", "disagreement_trials"):
        values[key] = settings_checks.number(
            SECTION,
            key,
            given[key],
            integer=True,
            low=1,
            high=MAX_TRIALS,
            fix=f"give {key} as a whole number from 1 to {MAX_TRIALS}",
        )
    for key in _SECONDS:
        values[key] = settings_checks.number(
            SECTION, key, given[key], above=0, fix=f"give {key} as a positive number of seconds"
        )
    if given["parallel"] not in ("ddp", "fsdp"):
        raise _problem(f'parallel = {given["parallel"]!r}: use "ddp" or "fsdp"')
    net_rate = given["net_rate"]
    if not isinstance(net_rate, str) or not re.fullmatch(r"\d+(\.\d+)?[kmg]?bit", net_rate):
        raise _problem(f'net_rate = {net_rate!r}: give a tc rate such as "20mbit"')
    values.update(parallel=given["parallel"], net_rate=net_rate, **_job_settings(mapping))
    settings = DrillSettings(**values)
    _check_shape(settings)
    return settings


def _check_shape(settings: DrillSettings) -> None:
    ranks, steps, at_step = settings.ranks, settings.steps, settings.at_step
    if not 2 <= ranks <= MAX_RANKS:
        raise _problem(
            f"ranks = {ranks}: the drill job runs 2 to {MAX_RANKS} ranks on one "
            f"machine; set ranks between 2 and {MAX_RANKS}"
        )
    if steps < 4:
        raise _problem(f"steps = {steps}: the job needs at least 4 steps")
    if not 1 <= at_step <= steps - 2:
        raise _problem(
            f"at_step = {at_step} is beyond the job's {steps} steps: choose "
            f"at_step from 1 to {steps - 2}, or raise steps"
        )
    if not 0 <= settings.target_rank < ranks:
        raise _problem(
            f"target_rank = {settings.target_rank} but the job has {ranks} "
            f"ranks: choose target_rank from 0 to {ranks - 1}"
        )
    if settings.ckpt_every < 1:
        raise _problem(f"ckpt_every = {settings.ckpt_every}: must be at least 1")


def _job_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The job keys of the drill table, checked; ConfigError names the problem and the fix."""
    try:
        return _checked_job(mapping)
    except ValueError as exc:
        raise _problem(str(exc)) from exc


def _checked_job(mapping: Mapping[str, Any]) -> dict[str, Any]:
    job = mapping.get("job", "")
    if not isinstance(job, str):
        raise ValueError(
            f"job = {job!r}: give the script and its arguments as one string, "
            'e.g. "train.py --config small.yaml"'
        )
    settings: dict[str, Any] = {"job": job.strip()}
    if settings["job"] or mapping.get("job_cwd"):
        settings["job_cwd"] = _job_cwd(mapping.get("job_cwd", ""))
    if settings["job"]:
        _check_job_text(settings["job"], Path(settings.get("job_cwd", "")))
    settings["job_env"] = _job_env(mapping.get("job_env", {}))
    settings["job_fresh_reference"] = settings_checks.flag(
        SECTION, "job_fresh_reference", mapping.get("job_fresh_reference", False)
    )
    settings["job_with"] = settings_checks.strings(
        SECTION, "job_with", mapping.get("job_with", []), example='["-e ."]', one_is_a_list=True
    )
    pattern = mapping.get("job_step_pattern", DEFAULT_STEP_PATTERN)
    try:
        compiled = re.compile(str(pattern))
    except re.error as exc:
        raise ValueError(
            f"job_step_pattern = {pattern!r} is not a regular expression: {exc}"
        ) from exc
    if "step" not in compiled.groupindex:
        raise ValueError(
            f"job_step_pattern = {pattern!r} has no (?P<step>...) group: name the step "
            "number's group step (and the loss's group loss)"
        )
    settings["job_step_pattern"] = str(pattern)
    for key in ("job_rtol", "job_fault_after_s"):
        if mapping.get(key) is not None:
            settings[key] = settings_checks.number(
                SECTION, key, mapping[key], above=0, fix=f"give {key} as a positive number"
            )
    return settings


def _job_cwd(value: Any) -> str:
    """``job_cwd`` as an absolute folder (default: where torchcanary runs)."""
    if not isinstance(value, str):
        raise ValueError(f"job_cwd = {value!r}: give the folder the job starts in as a string")
    folder = Path(value or ".").expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"job_cwd = {value!r} is not a folder (from {os.getcwd()}): give the folder "
            "your job starts in, relative to where torchcanary runs or absolute"
        )
    return str(folder.resolve())


def _job_env(value: Any) -> dict[str, str]:
    """``job_env``: a table of variables, or ``KEY=VALUE`` words (``--job-env``)."""
    if isinstance(value, list):
        table: dict[str, Any] = {}
        for word in value:
            name, equals, text = str(word).partition("=")
            if not equals or not name:
                raise ValueError(
                    f"--job-env {word!r} is not KEY=VALUE: write it as --job-env NAME=value"
                )
            table[name] = text
        value = table
    if not isinstance(value, dict):
        raise ValueError(
            f'job_env = {value!r}: give a table of variables, e.g. job_env = {{ SEED = "1" }}'
        )
    env: dict[str, str] = {}
    for name, text in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ValueError(f"job_env: {name!r} is not a variable name (letters, digits, _)")
        if name in _OWNED_VARIABLES or str(name).startswith(_OWNED_PREFIXES):
            raise ValueError(
                f"job_env: {name} is set by the drill and torchrun for each rank; leave it out"
            )
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise ValueError(f"job_env: {name} = {text!r}: give a string or a number")
        env[str(name)] = str(text)
    return dict(sorted(env.items()))


def _check_job_text(text: str, cwd: Path) -> None:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"job = {text!r} cannot be split like a shell line: {exc}") from exc
    if not argv:
        raise ValueError("job = '': give the script and its arguments")
    if Path(argv[0]).name in _LAUNCHERS or Path(argv[0]).name.startswith("python"):
        raise ValueError(
            f"job = {text!r}: give the script and its arguments, not the launcher "
            "(the drill starts torchrun itself; set ranks or --nproc for --nproc-per-node)"
        )
    if argv[0] == "-m":
        if len(argv) < 2:
            raise ValueError(f"job = {text!r}: -m needs a module name")
        return
    if not (cwd / argv[0]).is_file():
        raise ValueError(
            f"job script {argv[0]!r} not found (from {cwd}): give its path relative to "
            "job_cwd (default: where torchcanary runs), or an absolute one"
        )
