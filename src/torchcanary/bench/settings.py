"""The ``[tool.torchcanary.bench]`` table: validated, defaults filled, as a typed record.

Every key a user can set is a field of :class:`BenchSettings` or of one benchmark family
table; anything else is a ConfigError naming the key and the fix. The defaults keep a
``torchcanary run`` bench section to a few minutes on two cores; the families and budgets
scale up from here.

Top-level keys, defaults in brackets:
- ``aa`` [false]: compare the baseline with itself (``torchcanary bench --aa``);
- ``aa_control`` [true]: in an A/B run, also measure a second, separate baseline worker set
  every round: the A/A control that gives each benchmark its minimum detectable effect;
- ``device`` [auto: cuda when both environments see a GPU, else cpu];
- ``clock`` [auto: process CPU time for single-threaded CPU compute, else wall time];
- ``threads`` [1], ``cpus`` [[]: the last ``threads`` CPUs the process may use];
- ``groups`` [12]: round groups, each with fresh worker processes for every side. The
  verdict is confirmed across groups with Student's t on groups - 1 degrees of freedom,
  so groups, not samples, limit power: on 2 CPUs 6 groups found a 3% slowdown that was
  the only change in 18 benchmarks 13 times in 40, 12 groups 40 in 40, with 0 false
  alarms in 400 A/A comparisons (the self-check);
- ``rounds`` [60] and ``group_budget_s`` [1.0]: interleaved rounds per group and benchmark,
  stopped early once that many seconds of samples are taken;
- ``samples_per_round`` [5], ``max_batch_ms`` [25], ``min_sample_ms`` [1.0]: the samples
  each side takes per round (fewer when they would last longer than ``max_batch_ms``), and
  the least time one sample (a calibrated inner loop) may last;
- ``warmup_max_s`` [1.0]: the longest a warm-up may take before giving up on settling;
- ``sequential`` [true], ``first_look`` [4], ``look_every`` [1]: look at the evidence after
  ``first_look`` groups and every ``look_every`` after, and stop measuring a benchmark whose
  verdict is settled (``measure.sequential`` says how the false-alarm rate is kept). A look
  costs no measuring time, and each one spends 1 % of the FDR on early changes, so looking
  after every group settles benchmarks a group sooner for a final FDR of 0.92 x ``fdr``
  (0.96 x with every second group);
- ``budget_s`` [0: none]: the most seconds the bench may spend measuring; no group starts
  that the last one's duration says would end past it (``--budget 5m``), and what is still
  undecided then is judged on what it has;
- ``oneshot_samples`` [1]: fresh-interpreter samples per group and side (startup, compile);
  each group's log ratio is one observation, judged by Student's t across the groups;
- ``timeout_s`` [180]: per worker call; a benchmark that exceeds it is isolated as a timeout;
- ``fdr`` [0.01]: Benjamini-Hochberg false discovery rate over the run's benchmarks;
- ``equivalence`` [0.05]: the half-width the ``1 - fdr`` interval must fit in for "same",
  never wider than the policy's ``bench_max_slowdown`` (a not-significant interval that
  does not fit is "no-change-detected", with the interval);
- ``min_effect`` [0.01]: a significant change smaller than this whose interval fits the
  band is still "same"; at an interim look only an estimate under it settles as "same"
  (worker processes of one environment differ by about 1% on CPUs;
  see the self-check);
- ``noise_cv`` [0.10]: the spread (robust CV) above which a noise warning is given;
- ``seed`` [0: fresh each run, recorded]; ``families``: which benchmark families run;
- one table per family (``[tool.torchcanary.bench.linear]`` ...) and ``benchmarks``: extra
  specs, each a table with a ``kind`` and its fields (``kind = "workload"``: your own step
  function, see :mod:`torchcanary.workload_spec`);
- ``workloads`` [[]]: targets timed as eager workloads with their defaults
  (``torchcanary bench --workload pkg.mod:fn``);
- ``with`` [[]]: requirements installed for the workloads into a per-run overlay of each
  environment, never into the cached one (``--with "-e ."``); ``cwd`` ["."]: where pip runs
  and where file targets are found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from torchcanary import settings_checks
from torchcanary.errors import ConfigError
from torchcanary.worker.bench.specs import (
    ALL_KINDS,
    WORKLOAD,
    benchmark_id,
    canonical_dtype,
    with_defaults,
)
from torchcanary.workload_spec import parse_target, parse_workload

TABLE = "bench"  # the config table, named in its refusals

FAMILIES = ("linear", "gemm", "scaled_gemm", "sdpa", "copy", "startup", "compile", "collectives")
DEFAULT_FAMILIES = ("linear", "gemm", "sdpa", "startup", "collectives")

# Each family's table, with its defaults. Shapes are lists so a user adds sizes, not code.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "linear": {
        "batch": [1, 32],
        "k": [4096],
        "n": [4096],
        "dtypes": ["bfloat16", "float32"],
        "inputs": ["3d", "2d"],
    },
    "gemm": {"shapes": [[512, 512, 512], [256, 1024, 4096]], "dtypes": ["float32"]},
    "scaled_gemm": {"shapes": [[1024, 1024, 1024]], "dtypes": ["float8_e4m3fn"]},
    "sdpa": {
        "shapes": [
            {"batch": 1, "heads": 8, "q_len": 256, "kv_len": 256, "head_dim": 64, "causal": True},
            {"batch": 8, "heads": 8, "q_len": 1, "kv_len": 1024, "head_dim": 64, "causal": False},
        ],
        "dtypes": ["float32"],
    },
    "copy": {"numel": [16 * 1024 * 1024], "dtypes": ["float32"]},
    "startup": {"measures": ["import_torch", "first_linear"]},
    "compile": {"models": ["mlp"], "backend": "inductor"},
    "collectives": {
        "ops": ["all_reduce", "all_gather"],
        "bytes": [4096, 4 * 1024 * 1024],
        "world_sizes": [2],
        "backend": "auto",
    },
}
STARTUP_MEASURES = ("import_torch", "first_linear", "first_mm", "first_sdpa")
COMPILE_MODELS = ("mlp", "mlp_graph_break")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
SDPA_FIELDS = ("batch", "heads", "q_len", "kv_len", "head_dim")


@dataclass(frozen=True)
class BenchSettings:
    aa: bool = False
    aa_control: bool = True
    device: str = "auto"
    clock: str = "auto"
    threads: int = 1
    cpus: tuple[int, ...] = ()
    groups: int = 12
    rounds: int = 60
    group_budget_s: float = 1.0
    samples_per_round: int = 5
    max_batch_ms: float = 25.0
    min_sample_ms: float = 1.0
    warmup_max_s: float = 1.0
    oneshot_samples: int = 1
    sequential: bool = True
    first_look: int = 4
    look_every: int = 1
    budget_s: float = 0.0
    timeout_s: float = 180.0
    fdr: float = 0.01
    equivalence: float = 0.05
    min_effect: float = 0.01
    noise_cv: float = 0.10
    seed: int = 0
    families: tuple[str, ...] = DEFAULT_FAMILIES
    family_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    benchmarks: tuple[dict[str, Any], ...] = ()
    workloads: tuple[str, ...] = ()
    with_: tuple[str, ...] = ()
    cwd: str = "."

    def family(self, name: str) -> dict[str, Any]:
        return {**FAMILY_DEFAULTS[name], **self.family_settings.get(name, {})}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cpus"] = list(self.cpus)
        data["families"] = list(self.families)
        data["benchmarks"] = [dict(b) for b in self.benchmarks]
        data["workloads"] = list(self.workloads)
        data["with"] = list(data.pop("with_"))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchSettings:
        return parse_settings(data)


def _fail(key: str, problem: str, fix: str) -> ConfigError:
    return settings_checks.refusal(TABLE, key, problem, fix)


def _int_list(key: str, value: Any, low: int = 0, high: int = 1 << 40) -> list[int]:
    if not isinstance(value, list) or not value:
        raise _fail(key, f"{value!r} is not a non-empty list", "write e.g. [1, 8]")
    return [
        settings_checks.number(TABLE, key, item, integer=True, low=low, high=high) for item in value
    ]


def _dtypes(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _fail(key, f"{value!r} is not a non-empty list", 'write e.g. ["bfloat16"]')
    names = []
    for item in value:
        name = canonical_dtype(str(item))
        if name is None:
            raise _fail(
                key,
                f"unknown dtype {item!r}",
                "use float32, bfloat16, float16, float64, float8_e4m3fn, float8_e5m2 or int8",
            )
        names.append(name)
    return names


def _choices(key: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _fail(key, f"{value!r} is not a non-empty list", f"choose from {list(allowed)}")
    for item in value:
        if item not in allowed:
            raise _fail(key, f"unknown value {item!r}", f"choose from {list(allowed)}")
    return list(value)


def _shapes(key: str, value: Any) -> list[list[int]]:
    if not isinstance(value, list) or not value:
        raise _fail(key, f"{value!r} is not a non-empty list", "write e.g. [[512, 512, 512]]")
    shapes = []
    for shape in value:
        if not isinstance(shape, list) or len(shape) != 3:
            raise _fail(key, f"{shape!r} is not [m, k, n]", "write e.g. [[512, 512, 512]]")
        shapes.append(_int_list(key, shape))
    return shapes


def _sdpa_shapes(key: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _fail(
            key,
            f"{value!r} is not a non-empty list of tables",
            "write e.g. [{batch=1, heads=8, q_len=1, kv_len=1024, head_dim=64}]",
        )
    shapes = []
    for shape in value:
        if (
            not isinstance(shape, dict)
            or set(shape) - {*SDPA_FIELDS, "causal"}
            or set(SDPA_FIELDS) - set(shape)
        ):
            raise _fail(
                key,
                f"{shape!r} needs exactly {list(SDPA_FIELDS)} (and causal)",
                "write e.g. {batch=1, heads=8, q_len=1, kv_len=1024, head_dim=64}",
            )
        checked = {
            name: settings_checks.number(
                TABLE, f"{key}.{name}", shape[name], integer=True, low=0, high=1 << 30
            )
            for name in SDPA_FIELDS
        }
        checked["causal"] = bool(shape.get("causal", False))
        shapes.append(checked)
    return shapes


def _family(name: str, table: Any) -> dict[str, Any]:
    key = f"{name}"
    if name not in FAMILY_DEFAULTS:
        raise _fail(key, "unknown benchmark family", f"use one of {list(FAMILIES)}")
    if not isinstance(table, dict):
        raise _fail(key, "is not a table", f"write [tool.torchcanary.bench.{name}]")
    defaults = FAMILY_DEFAULTS[name]
    unknown = sorted(set(table) - set(defaults))
    if unknown:
        raise _fail(f"{key}.{unknown[0]}", "unknown key", f"use one of {sorted(defaults)}")
    checked: dict[str, Any] = {}
    for item, value in table.items():
        where = f"{key}.{item}"
        if item in ("batch", "k", "n", "numel", "bytes"):
            checked[item] = _int_list(where, value)
        elif item == "world_sizes":
            checked[item] = _int_list(where, value, 2, 16)
        elif item == "dtypes":
            checked[item] = _dtypes(where, value)
        elif item == "inputs":
            checked[item] = _choices(where, value, ("3d", "2d"))
        elif item == "shapes":
            checked[item] = _sdpa_shapes(where, value) if name == "sdpa" else _shapes(where, value)
        elif item == "measures":
            checked[item] = _choices(where, value, STARTUP_MEASURES)
        elif item == "models":
            checked[item] = _choices(where, value, COMPILE_MODELS)
        elif item == "ops":
            checked[item] = _choices(where, value, COLLECTIVE_OPS)
        elif item == "backend":
            allowed = (
                ("inductor", "aot_eager", "eager")
                if name == "compile"
                else ("auto", "gloo", "nccl", "nccl2")
            )
            checked[item] = _choices(where, [value], allowed)[0]
    return checked


def _extra_benchmarks(value: Any, cwd: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        raise _fail(
            "benchmarks",
            "is not a list of tables",
            'write [[tool.torchcanary.bench.benchmarks]] with kind = "gemm", ...',
        )
    specs = []
    for spec in value:
        if not isinstance(spec, dict) or spec.get("kind") not in ALL_KINDS:
            raise _fail(
                "benchmarks", f"{spec!r} has no known kind", f"set kind to one of {list(ALL_KINDS)}"
            )
        spec = dict(spec)
        if spec["kind"] == WORKLOAD:
            specs.append(parse_workload(spec, cwd, section=TABLE))
            continue
        try:
            benchmark_id(with_defaults(spec, "cpu"))
        except KeyError as missing:
            raise _fail(
                "benchmarks", f"a {spec['kind']} benchmark needs {missing}", "add that field"
            ) from None
        if "dtype" in spec:
            spec["dtype"] = _dtypes("benchmarks.dtype", [spec["dtype"]])[0]
        specs.append(spec)
    return tuple(specs)


_SCALARS: dict[str, tuple[type, float, float]] = {
    "threads": (int, 1, 1024),
    "groups": (int, 1, 100),
    "rounds": (int, 1, 1000),
    "samples_per_round": (int, 1, 1000),
    "group_budget_s": (float, 0.01, 86_400),
    "max_batch_ms": (float, 0.01, 86_400_000),
    "min_sample_ms": (float, 0.01, 10_000),
    "warmup_max_s": (float, 0, 600),
    "oneshot_samples": (int, 0, 100),
    "first_look": (int, 2, 100),
    "look_every": (int, 1, 100),
    "budget_s": (float, 0, 7 * 86_400),
    "timeout_s": (float, 1, 86_400),
    "fdr": (float, 1e-6, 0.5),
    "equivalence": (float, 0.001, 1),
    "min_effect": (float, 0.0, 1),
    "noise_cv": (float, 0.001, 10),
    "seed": (int, 0, 2**63),
}


def parse_settings(mapping: dict[str, Any] | None) -> BenchSettings:
    """Validate a bench table; the first problem found is raised as ConfigError."""
    mapping = dict(mapping or {})
    known = {f.name for f in fields(BenchSettings)} - {"with_"} | {"with"} | set(FAMILIES)
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise _fail(unknown[0], "unknown key", f"use one of {sorted(known - {'family_settings'})}")
    values: dict[str, Any] = {}
    cwd = mapping.get("cwd", ".")
    if not isinstance(cwd, str) or not Path(cwd).expanduser().is_dir():
        raise _fail("cwd", f"{cwd!r} is not a directory", "give the project's directory")
    values["cwd"] = str(Path(cwd).expanduser().resolve())
    for key, value in mapping.items():
        if key in _SCALARS:
            kind, low, high = _SCALARS[key]
            values[key] = settings_checks.number(
                TABLE, key, value, integer=kind is int, low=low, high=high
            )
        elif key in ("aa", "aa_control", "sequential"):
            values[key] = settings_checks.flag(TABLE, key, value)
        elif key == "device":
            values[key] = _choices(key, [value], ("auto", "cpu", "cuda"))[0]
        elif key == "clock":
            values[key] = _choices(key, [value], ("auto", "wall", "cpu"))[0]
        elif key == "cpus":
            values[key] = tuple(_int_list(key, value)) if value else ()
        elif key == "families":
            # An empty list is fine: only the extra ``benchmarks`` run.
            values[key] = tuple(_choices(key, value, FAMILIES)) if value != [] else ()
        elif key == "family_settings":
            values[key] = {name: _family(name, table) for name, table in value.items()}
        elif key == "benchmarks":
            values[key] = _extra_benchmarks(value, values["cwd"])
        elif key == "workloads":
            targets = settings_checks.strings(TABLE, key, value, example='["pkg.bench:step"]')
            values[key] = tuple(
                parse_target(target, values["cwd"], section=TABLE) for target in targets
            )
        elif key == "with":
            values["with_"] = settings_checks.strings(TABLE, key, value, example='["-e ."]')
    family_settings = dict(values.pop("family_settings", {}))
    for name in FAMILIES:
        if name in mapping:
            family_settings[name] = _family(name, mapping[name])
    return BenchSettings(**values, family_settings=family_settings)
