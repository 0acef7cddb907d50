"""The writer for a slower benchmark (kind ``timing``): its kernel, with its shapes, dtype
and threads, timed on the clock the run judged it on (process CPU time or wall time) in
each version, one fresh process per sample, interleaved the same way
for both (baseline, candidate, then candidate, baseline, ...); the script prints the ratio
of the medians with a 95% bootstrap interval. It takes the two interpreters as arguments,
so it runs once for both versions."""

from __future__ import annotations

from typing import Any

from torchcanary.repro.literals import NotWritable
from torchcanary.repro.reproducer import Reproducer
from torchcanary.section_types import Finding

ROUNDS = 8  # samples per version
LOOPS = 20  # kernel calls per timed sample

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

_DRIVER = '''\
"""{title}

Run: python repro.py BASELINE_PYTHON CANDIDATE_PYTHON (each an interpreter with its torch)."""
import random
import statistics
import subprocess
import sys

KERNEL = """
{kernel}"""


def sample(python):
    done = subprocess.run([python, "-c", KERNEL], capture_output=True, text=True, check=True)
    return float(done.stdout)


times = {{"baseline": [], "candidate": []}}
for round_ in range({rounds}):
    order = ("baseline", "candidate") if round_ % 2 == 0 else ("candidate", "baseline")
    for side in order:
        times[side].append(sample(sys.argv[1 if side == "baseline" else 2]))
base, cand = times["baseline"], times["candidate"]
ratio = statistics.median(cand) / statistics.median(base)
draw = random.Random(0)
boot = sorted(
    statistics.median(draw.choices(cand, k=len(cand)))
    / statistics.median(draw.choices(base, k=len(base)))
    for _ in range(2000)
)
low, high = boot[50], boot[1949]
word = "slower" if low > 1 else "faster" if high < 1 else "no change shown"
print(f"{{word}} x{{ratio:.3f}} [{{low:.3f}}, {{high:.3f}}] (candidate / baseline)")
print("baseline s:", [round(t, 6) for t in base])
print("candidate s:", [round(t, 6) for t in cand])
'''


def timing_reproducer(finding: Finding) -> Reproducer:
    """The timing script for one slower benchmark."""
    title = f"{finding.item} is slower in the candidate: {finding.delta} in the run"
    in_run = f"x{finding.ratio:.3f} [{finding.ci_low:.3f}, {finding.ci_high:.3f}]"
    script = _DRIVER.format(title=title, kernel=kernel(finding.facts), rounds=ROUNDS)
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=title,
        script=script,
        observed={"baseline": "1 (the reference)", "candidate": f"{in_run} of the baseline"},
        expects={"both": "slower"},
        facts=dict(finding.facts),
        runs_both=True,
    )


def kernel(facts: dict[str, Any]) -> str:
    """One sample's code: what the benchmark times, built from its spec."""
    spec = facts["spec"]
    # the clock the run judged it on: process CPU time, or wall time
    clock = "process_time" if facts.get("clock") == "cpu" else "perf_counter"
    if facts["kind"] == "startup":
        return _IMPORT_TORCH.format(clock=clock)
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
        threads=facts["threads"], inputs=inputs, call=call, loops=LOOPS, clock=clock
    )
