"""The ``[tool.torchcanary.drill]`` table (and ``torchcanary drill`` flags), validated.

Settings, ``[tool.torchcanary.drill]`` (defaults in brackets):
- ``faults``: drill names, ``"fault"`` or ``"fault:recovery"``, or ``"all"``
  [``["kill:restart-unshared", "kill:reconfigure", "hang:timeout"]``: both environments
  in about 40 s on 2 cores, 50 s when the fault-free runs are made too];
- ``ranks`` [2], 2 to 4; ``steps`` [30]; ``at_step`` [12], the step after which the fault
  strikes; ``target_rank`` [1]; ``timeout_s`` [10], the process-group timeout;
  ``ckpt_every`` [5]; ``parallel`` ["ddp"] or "fsdp" (FSDP2 ``fully_shard``), the mode
  every drill runs, the in-place ones included (each result names the mode that ran);
  ``step_pad_s`` [0.05]; ``net_rate`` ["20mbit"] for net-slow; ``drill_timeout_s`` [180],
  the bound on one drill; ``seed`` [0].
- the user's own job instead of the built-in tiny GPT (``drill/user_job.py``): ``job``
  [""], the script and its arguments (``{scratch}`` is a fresh folder per run);
  ``job_with`` [[]], requirements installed over each environment first (``"-e ."``);
  ``job_step_pattern``, the regex (groups ``step``, ``loss``) for printed step lines;
  ``job_rtol`` [none: deterministic], the relative tolerance of a non-deterministic job;
  ``job_fault_after_s`` [half the fault-free run], when to strike a job that shows no steps;
  ``job_cwd`` [where torchcanary runs], the folder the job starts in; ``job_env`` [{}],
  variables the job is given; ``job_fresh_reference`` [false], make the job's fault-free
  run again instead of reusing the one cached for this job, its files and environment
  (the built-in job's too: its key is the environment, torchcanary's files and the
  job's shape).
- repeats (``drill/repeats.py``): ``trials`` [1], how many times each drill runs in each
  environment; ``disagreement_trials`` [3], how many trials each environment gets when
  they disagree (one passed every trial, the other failed or errored in one); 1 to 10.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from torchcanary.drill import repeats
from torchcanary.drill.catalog import DEFAULT_DRILLS, FULL_DRILLS, DrillSpec, parse_drill_name
from torchcanary.drill.user_job import DEFAULT_STEP_PATTERN
from torchcanary.errors import ConfigError

MAX_RANKS = 4
JOB_DEFAULTS: dict[str, Any] = {
    "job": "",
    "job_with": [],
    "job_step_pattern": DEFAULT_STEP_PATTERN,
    "job_rtol": None,
    "job_fault_after_s": None,
    "job_cwd": "",
    "job_env": {},
    "job_fresh_reference": False,
}
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


SPEC_DEFAULTS = {
    f.name: f.default for f in fields(DrillSpec) if f.name not in ("fault", "recovery")
}
_NUMBERS = ("timeout_s", "step_pad_s", "drill_timeout_s")
_INTEGERS = ("ranks", "steps", "at_step", "target_rank", "ckpt_every", "seed")


def _problem(message: str) -> ConfigError:
    return ConfigError(f"[tool.torchcanary.drill] {message}")


def _faults(value: Any) -> list[str]:
    if value == "all":
        return list(FULL_DRILLS)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _problem(f'faults = {value!r}: give a list such as ["kill:restart"] or "all"')
    names = []
    for name in value:
        try:
            fault, recovery = parse_drill_name(str(name))
        except ValueError as exc:
            raise _problem(f"faults: {exc}") from exc
        if f"{fault}:{recovery}" not in names:
            names.append(f"{fault}:{recovery}")
    if not names:
        raise _problem("faults = []: name at least one drill, or leave faults out")
    return names


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the drill table and fill in defaults; ConfigError names problem and fix."""
    own = {*SPEC_DEFAULTS, *JOB_DEFAULTS, *repeats.REPEAT_DEFAULTS}
    unknown = sorted(set(mapping) - own - {"faults"})
    if unknown:
        known = ", ".join(sorted(own))
        raise _problem(f"unknown key {unknown[0]!r}: known keys are faults, {known}")
    settings: dict[str, Any] = {**SPEC_DEFAULTS, **repeats.REPEAT_DEFAULTS}
    try:
        settings.update(parse_job_settings(dict(mapping)))
    except ValueError as exc:
        raise _problem(str(exc)) from exc
    settings["faults"] = _faults(mapping.get("faults", list(DEFAULT_DRILLS)))
    for key in (*_INTEGERS, *repeats.REPEAT_DEFAULTS):
        value = mapping.get(key, settings[key])
        if isinstance(value, bool) or not isinstance(value, int):
            raise _problem(f"{key} = {value!r}: must be a whole number")
        settings[key] = value
    for key in repeats.REPEAT_DEFAULTS:
        if not 1 <= settings[key] <= repeats.MAX_TRIALS:
            raise _problem(f"{key} = {settings[key]}: choose from 1 to {repeats.MAX_TRIALS}")
    for key in _NUMBERS:
        value = mapping.get(key, settings[key])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise _problem(f"{key} = {value!r}: must be a positive number of seconds")
        settings[key] = float(value)
    parallel = mapping.get("parallel", settings["parallel"])
    if parallel not in ("ddp", "fsdp"):
        raise _problem(f'parallel = {parallel!r}: use "ddp" or "fsdp"')
    settings["parallel"] = parallel
    net_rate = mapping.get("net_rate", settings["net_rate"])
    if not isinstance(net_rate, str) or not re.fullmatch(r"\d+(\.\d+)?[kmg]?bit", net_rate):
        raise _problem(f'net_rate = {net_rate!r}: give a tc rate such as "20mbit"')
    settings["net_rate"] = net_rate
    _check_shape(settings)
    return settings


def _check_shape(settings: dict[str, Any]) -> None:
    ranks, steps, at_step = settings["ranks"], settings["steps"], settings["at_step"]
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
    if not 0 <= settings["target_rank"] < ranks:
        raise _problem(
            f"target_rank = {settings['target_rank']} but the job has {ranks} "
            f"ranks: choose target_rank from 0 to {ranks - 1}"
        )
    if settings["ckpt_every"] < 1:
        raise _problem(f"ckpt_every = {settings['ckpt_every']}: must be at least 1")


def parse_job_settings(mapping: dict[str, Any]) -> dict[str, Any]:
    """The job keys of the drill table, checked; ValueError names the problem and the fix."""
    settings = dict(JOB_DEFAULTS)
    job = mapping.get("job", "")
    if not isinstance(job, str):
        raise ValueError(
            f"job = {job!r}: give the script and its arguments as one string, "
            'e.g. "train.py --config small.yaml"'
        )
    settings["job"] = job.strip()
    if settings["job"] or mapping.get("job_cwd"):
        settings["job_cwd"] = _job_cwd(mapping.get("job_cwd", ""))
    if settings["job"]:
        _check_job_text(settings["job"], Path(settings["job_cwd"]))
    settings["job_env"] = _job_env(mapping.get("job_env", {}))
    fresh = mapping.get("job_fresh_reference", False)
    if not isinstance(fresh, bool):
        raise ValueError(f"job_fresh_reference = {fresh!r}: must be true or false")
    settings["job_fresh_reference"] = fresh
    with_ = mapping.get("job_with", [])
    if isinstance(with_, str):
        with_ = [with_]
    if not isinstance(with_, list) or not all(isinstance(w, str) for w in with_):
        raise ValueError(f'job_with = {with_!r}: give requirements as strings, e.g. ["-e ."]')
    settings["job_with"] = [w for w in with_ if w.strip()]
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
        value = mapping.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{key} = {value!r}: must be a positive number")
        settings[key] = float(value)
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
