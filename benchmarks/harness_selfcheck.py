"""How far the bench harness can be trusted on this machine: false alarms, power, time.

Runs the real machinery (fresh workers per round group, interleaved rounds, the same
statistics and Benjamini-Hochberg control as ``torchcanary run``) on synthetic workloads
of known cost in the baseline environment. Every benchmark has three sides, as an A/B run
with its A/A control does: the baseline (A), a second worker set of the same (A2), and a
side made k% heavier (B, k = 0 for pure A/A benchmarks). So:

- every A vs A2 comparison, and A vs B at k = 0, is a null: any "slower"/"faster" is a
  false alarm;
- A vs B at k > 0 is a known slowdown: "slower" is a detection.

On the same samples it also applies three other tools' decision rules, written from their
documentation and source:
- asv (``asv compare``): changed when the ratio of medians passes ``factor`` (1.1) and the
  Mann-Whitney U test gives p < 0.002 (``asv.statistics.is_different``);
- pyperf (``compare_to``): Student's two-sample t-test on the raw values at 95%
  (``pyperf._utils.is_significant``), slower/faster by the means;
- torch.utils.benchmark (``Compare``): medians from its own ``Measurement`` (computed inside
  the torch environment); a value within 1% of the best is not marked, beyond it is slower
  (``_Row.color_segment``); ``has_warnings`` (IQR above 10% of the median) is reported.

Usage: python benchmarks/harness_selfcheck.py [--per-k 8] [--ks 0,2,3,5,10] [--group-budget-s 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary.context import RunContext
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import default_import_root
from torchcanary.measure import compare, stats
from torchcanary.measure.interleave import Interleaver
from torchcanary.measure.samples import BASELINE, BASELINE_TWIN, Side
from torchcanary.measure.settings import parse_settings
from torchcanary.measure.specs import benchmark_id
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.store.sqlite import Store

HEAVIER = Side("B", "candidate", "candidate")
ASV_FACTOR, ASV_P = 1.1, 0.002
PYPERF_CONFIDENCE = 0.95
TORCH_BEST_BAND = 1.01

_TORCH_SUMMARY = """
import json, sys
from torch.utils.benchmark.utils.common import Measurement, TaskSpec
out = []
for times in json.load(sys.stdin):
    m = Measurement(1, times, TaskSpec(stmt="selfcheck", setup=""))
    out.append({"median": m.median, "iqr": m.iqr, "has_warnings": m.has_warnings})
print(json.dumps(out))
"""


def workload(kind: str, k: float, index: int) -> dict[str, Any]:
    """A synthetic spec whose side B does k% more work."""
    if kind == "busy":
        base = 20_000
        spec = {"kind": "synthetic", "op": "busy", "iterations": base}
        heavier = {"iterations": round(base * (1 + k / 100))}
    else:
        base = 100
        spec = {"kind": "synthetic", "op": "matmul", "size": 64, "repeat": base}
        heavier = {"repeat": round(base * (1 + k / 100))}
    spec["label"] = f"{kind}-k{k:g}-{index}"
    spec["overrides"] = {"B": heavier}
    spec["slowdown_pct"] = k
    return spec


def student_t_verdict(first: list[float], second: list[float]) -> str:
    """pyperf's rule: pooled-variance two-sample t-test at 95%, direction by the means."""
    n1, n2 = len(first), len(second)
    mean1, mean2 = statistics.fmean(first), statistics.fmean(second)
    pooled = (sum((x - mean1) ** 2 for x in first) + sum((x - mean2) ** 2 for x in second)) / (
        n1 + n2 - 2
    )
    if pooled == 0:
        return "same"
    t = (mean2 - mean1) / math.sqrt(pooled * (1 / n1 + 1 / n2))
    if abs(t) < stats.t_quantile(1 - (1 - PYPERF_CONFIDENCE) / 2, n1 + n2 - 2):
        return "same"
    return "slower" if t > 0 else "faster"


def asv_verdict(first: list[float], second: list[float]) -> str:
    ratio = stats.median(second) / stats.median(first)
    _u, p = stats.mann_whitney_u(first, second)
    if p >= ASV_P or 1 / ASV_FACTOR <= ratio <= ASV_FACTOR:
        return "same"
    return "slower" if ratio > 1 else "faster"


def torch_verdicts(python: str, pairs: list[tuple[list[float], list[float]]]) -> list[str]:
    flat = [times for pair in pairs for times in pair]
    done = subprocess.run(
        [python, "-c", _TORCH_SUMMARY],
        input=json.dumps(flat),
        capture_output=True,
        text=True,
        check=True,
    )
    summaries = json.loads(done.stdout.strip().splitlines()[-1])
    verdicts = []
    for index in range(0, len(summaries), 2):
        first, second = summaries[index], summaries[index + 1]
        best = min(first["median"], second["median"])
        if max(first["median"], second["median"]) <= best * TORCH_BEST_BAND:
            verdict = "same"
        else:
            verdict = "slower" if second["median"] > first["median"] else "faster"
        if first["has_warnings"] or second["has_warnings"]:
            verdict += " (IQR warning)"
        verdicts.append(verdict)
    return verdicts


def wilson_upper(hits: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 1.0
    p = hits / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + margin) / (1 + z * z / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-k", type=int, default=8, help="benchmarks per k")
    parser.add_argument("--ks", default="0,2,3,5,10", help="slowdowns in percent")
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=60, help="most rounds per group")
    parser.add_argument(
        "--group-budget-s",
        type=float,
        default=3.0,
        help="seconds of samples per benchmark and group, all sides",
    )
    parser.add_argument("--samples", type=int, default=5, help="samples per round and side")
    parser.add_argument("--min-sample-ms", type=float, default=1.0)
    parser.add_argument("--fdr", type=float, default=0.01)
    parser.add_argument("--workloads", default="busy,matmul")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    args = parser.parse_args()
    ks = [float(k) for k in args.ks.split(",")]
    kinds = args.workloads.split(",")

    env = ensure_environment("baseline", parse_env_spec(args.baseline))
    settings = parse_settings(
        {
            "groups": args.groups,
            "rounds": args.rounds,
            "group_budget_s": args.group_budget_s,
            "samples_per_round": args.samples,
            "min_sample_ms": args.min_sample_ms,
            "fdr": args.fdr,
        }
    )
    specs = [workload(kinds[i % len(kinds)], k, i) for k in ks for i in range(args.per_k)]
    for spec in specs:
        spec["id"] = benchmark_id(spec)
    scratch = Path(tempfile.mkdtemp(prefix="canary-selfcheck-"))
    store = Store(scratch / "selfcheck.db")
    plan = RunPlan(baseline=args.baseline, candidate=args.baseline)
    ctx = RunContext(
        run_id=store.create_run(plan.to_json()),
        store=store,
        plan=plan,
        environments={"baseline": env, "candidate": env},
        import_root=default_import_root(),
        work_dir=scratch,
        progress=Progress(quiet=True),
    )
    seed = args.seed or random.SystemRandom().randrange(1, 2**31)
    started = time.monotonic()
    try:
        measured = Interleaver(
            ctx,
            settings,
            [BASELINE, BASELINE_TWIN, HEAVIER],
            random.Random(seed),
            progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
        ).run(lambda device: [{**s, "device": device} for s in specs])
    finally:
        ctx.close_workers()
    wall = time.monotonic() - started

    confidence = 1 - args.fdr
    by_clock = {}
    for clock in ("cpu", "wall"):
        comparisons: dict[str, dict[str, Any]] = {}
        for spec in specs:
            samples = measured.benchmarks[spec["id"]]
            comparisons[spec["id"]] = {
                "ab": compare.compare_sides(samples, "A", "B", confidence, clock),
                "aa": compare.compare_sides(samples, "A", "A2", confidence, clock),
            }
        by_clock[clock] = (comparisons, compare.decide(comparisons, args.fdr, settings.equivalence))

    # Null comparisons: every A vs A2, and A vs B where B is not heavier.
    rows: list[dict[str, Any]] = []
    pairs = []
    for clock, (comparisons, decided) in by_clock.items():
        for spec in specs:
            samples = measured.benchmarks[spec["id"]]
            result = decided[spec["id"]]
            aa_ratio = comparisons[spec["id"]]["aa"].get("ratio", 1.0)
            verdict_aa = "same"
            if result.get("q_aa", 1.0) <= args.fdr:
                verdict_aa = "slower" if aa_ratio > 1 else "faster"
            for other, k, ours in (
                ("A2", 0.0, verdict_aa),
                ("B", spec["slowdown_pct"], result["verdict"]),
            ):
                comparison = comparisons[spec["id"]]["aa" if other == "A2" else "ab"]
                a, b = samples.times("A", clock), samples.times(other, clock)
                pairs.append((a, b))
                rows.append(
                    {
                        "clock": clock,
                        "k": k,
                        "torchcanary": ours,
                        "raw p<=fdr": "slower"
                        if comparison.get("p_value", 1.0) <= args.fdr
                        else "same",
                        "asv": asv_verdict(a, b),
                        "pyperf": student_t_verdict(a, b),
                    }
                )
    for row, verdict in zip(rows, torch_verdicts(env.python, pairs), strict=True):
        row["torch.utils.benchmark"] = verdict

    print(
        f"torchcanary bench harness self-check: {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end, torch {env.torch_version}, seed {seed}"
    )
    print(
        f"design: {args.groups} worker groups x up to {args.rounds} rounds "
        f"({args.group_budget_s:g} s of samples per group) x {args.samples} "
        f"samples of >= {args.min_sample_ms:g} ms per side; sides A, A2 (A/A control), B "
        f"(k% heavier); workloads {', '.join(kinds)}; {args.per_k} benchmarks per k; "
        f"FDR {args.fdr:g}"
    )
    rules = ("torchcanary", "raw p<=fdr", "asv", "pyperf", "torch.utils.benchmark")
    shifts = [k for k in ks if k > 0]
    for clock in by_clock:
        mine = [r for r in rows if r["clock"] == clock]
        nulls = [r for r in mine if r["k"] == 0]
        print(
            f"\nclock: {clock}"
            + (" (process CPU time, what clock = auto uses here)" if clock == "cpu" else "")
        )
        print(
            f"  {'rule':<24}{'A/A false alarms':>24}"
            + "".join(f"{f'detects {k:g}%':>16}" for k in shifts)
        )
        for rule in rules:
            alarms = sum(str(r[rule]).split(" ")[0] in ("slower", "faster") for r in nulls)
            line = f"  {rule:<24}{f'{alarms}/{len(nulls)} = {alarms / len(nulls):.1%}':>24}"
            for k in shifts:
                shifted = [r for r in mine if r["k"] == k]
                found = sum(str(r[rule]).startswith("slower") for r in shifted)
                line += f"{f'{found}/{len(shifted)} = {found / len(shifted):.0%}':>16}"
            print(line)
        ours = sum(r["torchcanary"] in ("slower", "faster") for r in nulls)
        print(
            f"  torchcanary false alarms, 95% upper bound: {wilson_upper(ours, len(nulls)):.1%}"
            "; too noisy to tell at each k: "
            + ", ".join(
                f"{k:g}%: {sum(r['torchcanary'] == 'too-noisy' for r in mine if r['k'] == k)}"
                for k in ks
            )
        )
        mdes = [d["mde"] for d in by_clock[clock][1].values() if d.get("mde") is not None]
        if mdes:
            print(
                f"  minimum detectable effect from the A/A control: median "
                f"{statistics.median(mdes):.1%}, 90th percentile {stats.quantile(mdes, 0.9):.1%}"
            )
    per_bench = [measured.benchmarks[s["id"]].measure_s for s in specs]
    print("\ntime to a verdict per benchmark")
    print(
        f"  timed measurement, all three sides: median {statistics.median(per_bench):.1f} s, "
        f"max {max(per_bench):.1f} s (A and B alone: about two thirds of that)"
    )
    print(
        f"  wall for the whole run incl. worker starts and calibration: {wall:.0f} s for "
        f"{len(specs)} benchmarks = {wall / len(specs):.1f} s each"
    )
    store.close()


if __name__ == "__main__":
    main()
