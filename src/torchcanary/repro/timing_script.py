"""The writer for a slower benchmark (kind ``timing``): its kernel (a fresh import of
torch, a linear, a matrix product, or a user's workload: its file's step function with each
side's params), with its shapes, dtype and threads, timed on the clock the run judged it on
(process CPU time or wall time) in each version, one fresh process per sample, interleaved
the same way for both (baseline, candidate, then candidate, baseline, ...). The script
prints the ratio (the geometric mean of the rounds' ratios) with its 95% t interval, whose
quantile ``torchcanary.stats`` gives when the script is written, so the script needs torch
alone. It takes the two interpreters as arguments, so it runs once for both versions."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torchcanary.repro.literals import NotWritable
from torchcanary.repro.reproducer import ROLES, Reproducer
from torchcanary.section_types import Finding
from torchcanary.stats import t_critical
from torchcanary.worker.bench.specs import WORKLOAD, spec_for_side

# Samples per version: at 8, a loaded 2-CPU machine read a 20 % slower import as
# "no change shown" (x1.077 [0.933, 1.243]).
ROUNDS = 16
SIDES = {"baseline": "A", "candidate": "B"}  # the bench's names for them (overrides)
LOOPS = 20  # the fewest kernel calls per timed sample
SAMPLE_S = 0.25  # the seconds of calls a sample aims at, by the run's time per call

_IMPORT_TORCH = """\
import time
started = time.{clock}()
import torch
print(time.{clock}() - started)
"""

_STEADY = """\
import time
import torch
torch.set_num_threads({threads})
torch.manual_seed(0)
{inputs}
for _ in range(3):
    {call}
started = time.{clock}()
for _ in range({loops}):
    {call}
print((time.{clock}() - started) / {loops})
"""

_WORKLOAD = """\
import importlib.util
import random
import sys
import time
import torch
torch.set_num_threads({threads})
sys.path.insert(0, {folder!r})
found = importlib.util.spec_from_file_location("workload", {path!r})
module = importlib.util.module_from_spec(found)
found.loader.exec_module(module)
random.seed(0)
torch.manual_seed(0)
step = module.{function}(**{params!r})
for _ in range(3):
    step()
started = time.{clock}()
for _ in range({loops}):
    step()
print((time.{clock}() - started) / {loops})
"""

_DRIVER = '''\
"""{title}

Run: python repro.py BASELINE_PYTHON CANDIDATE_PYTHON (each an interpreter with its torch)."""
import math
import statistics
import subprocess
import sys

KERNELS = {{
    "baseline": """
{baseline}""",
    "candidate": """
{candidate}""",
}}
T_CRITICAL = {t_critical!r}  # Student's t, two-sided 95 %, {rounds} - 1 degrees of freedom


def sample(side):
    python = sys.argv[1 if side == "baseline" else 2]
    done = subprocess.run([python, "-c", KERNELS[side]], capture_output=True, text=True, check=True)
    return float(done.stdout)


times = {{"baseline": [], "candidate": []}}
for round_ in range({rounds}):
    order = ("baseline", "candidate") if round_ % 2 == 0 else ("candidate", "baseline")
    for side in order:
        times[side].append(sample(side))
base, cand = times["baseline"], times["candidate"]
logs = [math.log(c / b) for b, c in zip(base, cand)]  # one ratio per round
half = T_CRITICAL * statistics.stdev(logs) / math.sqrt(len(logs))
mean = statistics.fmean(logs)
ratio, low, high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
word = "slower" if low > 1 else "faster" if high < 1 else "no change shown"
print(f"{{word}} x{{ratio:.3f}} [{{low:.3f}}, {{high:.3f}}] (candidate / baseline)")
print("baseline s:", [round(t, 6) for t in base])
print("candidate s:", [round(t, 6) for t in cand])
'''


def timing_reproducer(finding: Finding) -> Reproducer:
    """The timing script for one slower benchmark."""
    title = f"{finding.item} is slower in the candidate: {finding.delta} in the run"
    in_run = f"x{finding.ratio:.3f} [{finding.ci_low:.3f}, {finding.ci_high:.3f}]"
    kernels = {role: kernel(finding.facts, role) for role in ROLES}
    script = _DRIVER.format(
        title=title, rounds=ROUNDS, t_critical=t_critical(0.05, ROUNDS - 1), **kernels
    )
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=title,
        script=script,
        observed={"baseline": "1 (the reference)", "candidate": f"{in_run} of the baseline"},
        expects={"both": "slower"},
        facts=dict(finding.facts),
        runs_both=True,
        paths=_workload_folder(finding.facts),
    )


def _workload_target(facts: dict[str, Any]) -> tuple[Path, str]:
    """A user workload's file and function; a module target is not written: the script
    would need the project installed as the run's overlays had it."""
    where, function = str(facts["spec"]["target"]).rsplit(":", 1)
    if not where.endswith(".py"):
        raise NotWritable(
            f"the workload's target {where!r} is a module; name it by its file "
            "(path/to/file.py:function) for a standalone script"
        )
    return Path(where), function


def _workload_folder(facts: dict[str, Any]) -> tuple[str, ...]:
    """The folder a workload's script imports from, which must still be there to run it."""
    if facts["kind"] != WORKLOAD:
        return ()
    return (str(_workload_target(facts)[0].parent),)


def loops(facts: dict[str, Any]) -> int:
    """Kernel calls per timed sample: ``facts["loops"]`` where ``--reduce`` set it; else
    enough for about ``SAMPLE_S`` seconds at the run's time per call (a short sample in a
    fresh process is mostly noise), and at least ``LOOPS``."""
    if "loops" in facts:
        return int(facts["loops"])
    call_s = facts.get("call_s")
    return max(LOOPS, math.ceil(SAMPLE_S / call_s)) if call_s else LOOPS


def kernel(facts: dict[str, Any], role: str) -> str:
    """One sample's code in ``role``'s version: what the benchmark times, built from its
    spec as that side ran it (a workload's ``overrides`` may give one side other params)."""
    spec = spec_for_side(facts["spec"], SIDES[role])
    # the clock the run judged it on: process CPU time, or wall time
    clock = "process_time" if facts.get("clock") == "cpu" else "perf_counter"
    if facts["kind"] == "startup":
        return _IMPORT_TORCH.format(clock=clock)
    if facts["kind"] == WORKLOAD:
        if spec.get("mode", "eager") != "eager":
            raise NotWritable(f"a workload in {spec['mode']!r} mode (only eager is written)")
        path, function = _workload_target(facts)
        return _WORKLOAD.format(
            threads=facts["threads"],
            folder=str(path.parent),
            path=str(path),
            function=function,
            params=dict(spec.get("params", {})),
            loops=loops(facts),
            clock=clock,
        )
    dtype = f"torch.{spec['dtype']}"
    if facts["kind"] == "linear":
        batch, k, n = int(spec["batch"]), int(spec["k"]), int(spec["n"])
        shape = (batch, 1, k) if spec.get("input") == "3d" else (batch, k)
        inputs = (
            f"x = torch.randn({shape}, dtype={dtype})\nw = torch.randn(({n}, {k}), dtype={dtype})"
        )
        call = "torch.nn.functional.linear(x, w)"
    elif facts["kind"] == "gemm":
        m, k, n = int(spec["m"]), int(spec["k"]), int(spec["n"])
        inputs = (
            f"a = torch.randn(({m}, {k}), dtype={dtype})\n"
            f"b = torch.randn(({k}, {n}), dtype={dtype})"
        )
        call = "torch.mm(a, b)"
    else:
        raise NotWritable(f"a benchmark of kind {facts['kind']!r}")
    return _STEADY.format(
        threads=facts["threads"],
        inputs=inputs,
        call=call,
        loops=loops(facts),
        clock=clock,
    )
