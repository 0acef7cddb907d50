"""A user's workload table (``[[bench.benchmarks]] kind = "workload"``), validated into a
plain spec: the bench times it, the calls record what it calls.

The target is ``"package.module:function"`` or ``"path/to/file.py:function"``; the function
does its setup once (build the model, move it, make inputs) and returns the callable that
is timed. Everything else is optional::

    [[tool.torchcanary.bench.benchmarks]]
    kind = "workload"
    target = "myproject.bench:train_step"
    params = {batch = 8, d_model = 256}        # keyword arguments for the target
    mode = "compile"                            # or "eager" (the default)
    compile = {backend = "inductor", mode = "default"}
    rtol = 1e-4                                 # numerics between versions (default: the
    atol = 1e-5                                 # dtype's assert_close tolerance)
    timeout_s = 300                             # per call into this workload
    overrides = {candidate = {params = {layers = 3}}}   # the harness self-check only

A file target is made absolute against ``cwd`` here, so the worker (started elsewhere)
finds the same file and a resumed run means the same one. Standard library only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from torchcanary import settings_checks
from torchcanary.errors import ConfigError
from torchcanary.worker.bench.specs import WORKLOAD

MODES = ("eager", "compile")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager", "cudagraphs")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
FIELDS = (
    "kind",
    "target",
    "params",
    "label",
    "mode",
    "compile",
    "rtol",
    "atol",
    "numerics_calls",
    "timeout_s",
    "device",
    "overrides",
)
# Internal side names (samples.Side) each role's override applies to.
_OVERRIDE_SIDES = {"baseline": ("A", "A2"), "candidate": ("B",)}
_MODULE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")
_FUNCTION = re.compile(r"^[A-Za-z_]\w*$")
_EXAMPLE = 'write target = "myproject.bench:train_step" or "bench/steps.py:train_step"'


def _fail(section: str, key: str, problem: str, fix: str) -> ConfigError:
    return settings_checks.refusal(section, f"workload {key}", problem, fix)


def parse_target(text: Any, cwd: str = ".", *, section: str) -> str:
    """``module:function`` as given, or ``file.py:function`` with the file made absolute."""
    if not isinstance(text, str) or text.count(":") < 1:
        raise _fail(section, "target", f"{text!r} is not 'module:function'", _EXAMPLE)
    where, function = text.rsplit(":", 1)
    if not _FUNCTION.match(function):
        raise _fail(section, "target", f"{function!r} is not a function name", _EXAMPLE)
    if where.endswith(".py"):
        path = Path(cwd, where).expanduser().resolve()
        if not path.is_file():
            raise _fail(section, "target", f"no file {path}", "give a path relative to the project")
        return f"{path}:{function}"
    if not _MODULE.match(where):
        raise _fail(section, "target", f"{where!r} is not a module name", _EXAMPLE)
    return text


def _params(section: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(section, key, f"{value!r} is not a table", f"write {key} = {{batch = 8}}")
    return dict(value)


def _compile_options(section: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        example = 'write compile = {backend = "inductor"}'
        raise _fail(section, "compile", f"{value!r} is not a table", example)
    unknown = sorted(set(value) - {"backend", "mode", "fullgraph", "dynamic"})
    if unknown:
        raise _fail(
            section, f"compile.{unknown[0]}", "unknown key", "use backend, mode, fullgraph, dynamic"
        )
    options = {"backend": value.get("backend", "inductor"), "mode": value.get("mode", "default")}
    if options["backend"] not in COMPILE_BACKENDS:
        raise _fail(
            section, "compile.backend", f"{options['backend']!r}", f"use {list(COMPILE_BACKENDS)}"
        )
    if options["mode"] not in COMPILE_MODES:
        raise _fail(section, "compile.mode", f"{options['mode']!r}", f"use {list(COMPILE_MODES)}")
    for flag in ("fullgraph", "dynamic"):
        if flag in value:
            if not isinstance(value[flag], bool):
                raise _fail(section, f"compile.{flag}", f"{value[flag]!r}", f"write {flag} = true")
            options[flag] = value[flag]
    return options


def _overrides(section: str, value: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``{candidate = {params = {...}}}`` as per-side spec changes, params merged."""
    if not isinstance(value, dict) or set(value) - set(_OVERRIDE_SIDES):
        raise _fail(
            section, "overrides", f"{value!r}", "write overrides = {candidate = {params = {...}}}"
        )
    by_side: dict[str, Any] = {}
    for role, change in value.items():
        if not isinstance(change, dict) or set(change) != {"params"}:
            raise _fail(
                section, f"overrides.{role}", f"{change!r}", "only params may be overridden"
            )
        merged = {**params, **_params(section, f"overrides.{role}.params", change["params"])}
        for side in _OVERRIDE_SIDES[role]:
            by_side[side] = {"params": merged}
    return by_side


def parse_workload(table: dict[str, Any], cwd: str = ".", *, section: str) -> dict[str, Any]:
    """A validated workload spec; a spec already parsed (absolute file target) passes again.

    ``section``: the config table a refusal names (the bench's, wherever the spec came from).
    """
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise _fail(section, unknown[0], "unknown key", f"use one of {list(FIELDS[1:])}")
    if "target" not in table:
        raise _fail(section, "target", "missing", _EXAMPLE)
    spec: dict[str, Any] = {
        "kind": WORKLOAD,
        "target": parse_target(table["target"], cwd, section=section),
    }
    spec["params"] = _params(section, "params", table.get("params", {}))
    mode = table.get("mode", "eager")
    if mode not in MODES:
        raise _fail(section, "mode", f"{mode!r}", f"use one of {list(MODES)}")
    spec["mode"] = mode
    if mode == "compile":
        spec["compile"] = _compile_options(section, table.get("compile", {}))
    elif "compile" in table:
        raise _fail(
            section, "compile", 'given with mode = "eager"', 'add mode = "compile" or drop it'
        )
    if "label" in table:
        if not isinstance(table["label"], str) or not _FUNCTION.match(
            table["label"].replace("-", "_").replace(".", "_")
        ):
            raise _fail(section, "label", f"{table['label']!r}", "use letters, digits, _ - .")
        spec["label"] = table["label"]
    for key in ("rtol", "atol"):
        if key in table:
            spec[key] = settings_checks.number(
                section, f"workload {key}", table[key], low=0, high=1e6
            )
    calls = table.get("numerics_calls", 2)
    spec["numerics_calls"] = int(
        settings_checks.number(section, "workload numerics_calls", calls, low=0, high=100)
    )
    if "timeout_s" in table:
        spec["timeout_s"] = settings_checks.number(
            section, "workload timeout_s", table["timeout_s"], low=1, high=86_400
        )
    if "device" in table:
        if table["device"] not in ("cpu", "cuda"):
            raise _fail(section, "device", f"{table['device']!r}", 'use "cpu" or "cuda"')
        spec["device"] = table["device"]
    if "overrides" in table:
        overrides = table["overrides"]
        already = isinstance(overrides, dict) and set(overrides) <= {"A", "A2", "B"}
        spec["overrides"] = (
            dict(overrides) if already else _overrides(section, overrides, spec["params"])
        )
    return spec
