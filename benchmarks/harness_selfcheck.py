"""How far the bench harness can be trusted on this machine: false alarms, power, time.

Runs the real machinery (fresh workers per round group, interleaved rounds, the same
statistics and Benjamini-Hochberg control as ``torchcanary run``) on synthetic workloads
of known cost in the baseline environment. Every benchmark has three sides, as an A/B run
with its A/A control does: the baseline (A), a second worker set of the same (A2), and a
side made k% heavier (B). So:

- A vs B at k = 0 is a null: any "slower"/"faster" verdict is a false alarm (the A/A
  controls, A vs A2, calibrate the run as in a real one, so they are not counted as nulls
  again; their own uncalibrated alarm rate is printed beside);
- A vs B at k > 0 is a known slowdown: "slower" is a detection.

"torchcanary, judged alone" is the same rule with BH over a family of one benchmark
(the run's calibration kept): the loosest threshold any run, whatever its other
benchmarks, could give a null, so its false-alarm rate bounds every family's.
"torchcanary, 1 change in N" judges it at FDR / N instead: what BH does to the only real
change in a run of N benchmarks, the hardest case for detection.

On the same samples it also applies three other tools' decision rules, written from their
documentation and source:
- asv (``asv compare``): changed when the ratio of medians passes ``factor`` (1.1) and the
  Mann-Whitney U test gives p < 0.002 (``asv.statistics.is_different``);
- pyperf (``compare_to``): Student's two-sample t-test on the raw values at 95%
  (``pyperf._utils.is_significant``), slower/faster by the means;
- torch.utils.benchmark (``Compare``): medians from its own ``Measurement`` (computed inside
  the torch environment); a value within 1% of the best is not marked, beyond it is slower
  (``_Row.color_segment``); ``has_warnings`` (IQR above 10% of the median) is reported.

Usage: python benchmarks/harness_selfcheck.py [--nulls 16] [--per-k 8] [--ks 2,3,5,10]
                                                [--layout steady|oneshot] [--family 18]
                                                [--dump F | --reanalyse F ...]

``--layout oneshot`` measures the one-shot layout of startup and compile benchmarks: each
worker group gives one sample per side (``--groups 12 --rounds 1 --samples 1``), so every
group holds a single pair and the verdict rests on the 12 groups alone. The samples come
from warm synthetic workloads rather than fresh interpreters, which keeps the statistics
identical (one pair per separate set of worker processes) at a fraction of the time.

Several dumps given to ``--reanalyse`` are judged each as its own run (its own BH family and
calibration) and their counts pooled: a long measurement can be taken in pieces.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary import stats
from torchcanary.bench import compare, sequential, verdicts
from torchcanary.bench.interleave import Interleaver, Measurements
from torchcanary.bench.samples import BASELINE, BASELINE_TWIN, Batch, BenchmarkSamples, Side
from torchcanary.bench.section import POLICY_DEFAULTS
from torchcanary.bench.settings import BenchSettings, parse_settings
from torchcanary.bench.suite import expand
from torchcanary.context import RunContext
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.runner import import_root
from torchcanary.store.sqlite import SqliteStore
from torchcanary.worker.bench.specs import benchmark_id

HEAVIER = Side("B", "candidate", "candidate")
ASV_FACTOR, ASV_P = 1.1, 0.002
PYPERF_CONFIDENCE = 0.95
TORCH_BEST_BAND = 1.01
MAX_SLOWDOWN = float(POLICY_DEFAULTS["bench_max_slowdown"])  # what "same" must stay under
# Our rule with BH over a family of one: the loosest threshold any run could give a null.
ALONE = "torchcanary, judged alone"
# The run's own rule: interim looks that settle benchmarks early (measure.sequential).
SEQUENTIAL = "torchcanary, sequential"

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


def _measure(
    args: argparse.Namespace, env: Any, specs: list[dict[str, Any]], seed: int
) -> tuple[Any, float]:
    """Run the real scheduler over the synthetic specs; the measurements and the wall time."""
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
    scratch = Path(tempfile.mkdtemp(prefix="canary-selfcheck-"))
    store = SqliteStore(scratch / "selfcheck.db")
    plan = RunPlan(baseline=args.baseline, candidate=args.baseline)
    ctx = RunContext(
        run_id=store.create_run(plan.to_json()),
        store=store,
        plan=plan,
        environments={"baseline": env, "candidate": env},
        import_root=import_root(plan, scratch),
        work_dir=scratch,
        progress=Progress(quiet=True),
    )
    started = time.monotonic()
    try:
        measured = Interleaver(
            ctx,
            settings,
            [BASELINE, BASELINE_TWIN, HEAVIER],
            random.Random(seed),
            progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
        ).run(lambda device: [{**s, "device": device} for s in specs])
        wall = time.monotonic() - started
    finally:
        ctx.close_workers()
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)  # --dump keeps what is worth keeping
    return measured, wall


def _dump(path: Path, measured: Any, wall: float) -> None:
    path.write_text(
        json.dumps(
            {
                "wall_s": wall,
                "benchmarks": {
                    bench_id: {
                        "measure_s": samples.measure_s,
                        "batches": {
                            side: [
                                [b.group, b.round, b.slot, list(b.times_s), list(b.cpu_s)]
                                for b in batches
                            ]
                            for side, batches in samples.batches.items()
                        },
                    }
                    for bench_id, samples in measured.benchmarks.items()
                },
            }
        )
    )


def _load(path: Path, specs: list[dict[str, Any]]) -> tuple[Measurements, float]:
    """A dump read back, for the same design flags it was measured with."""
    dumped = json.loads(path.read_text())
    measured = Measurements()
    for spec in specs:
        if spec["id"] not in dumped["benchmarks"]:
            raise SystemExit(
                f"{path} has no benchmark {spec['id']}: pass the --nulls, --per-k, --ks and "
                "--workloads it was measured with"
            )
        entry = dumped["benchmarks"][spec["id"]]
        samples = BenchmarkSamples(spec["id"], spec, measure_s=entry["measure_s"])
        for side, batches in entry["batches"].items():
            for group, round_index, slot, times, cpu in batches:
                samples.add(side, Batch(group, round_index, slot, tuple(times), tuple(cpu)))
        measured.benchmarks[spec["id"]] = samples
    return measured, dumped["wall_s"]


def _rows(
    args: argparse.Namespace, env: Any, specs: list[dict[str, Any]], measured: Any, clock: str
) -> list[dict[str, Any]]:
    """One row per A/B comparison, with each rule's verdict on the same samples."""
    comparisons = {}
    for spec in specs:
        samples = measured.benchmarks[spec["id"]]
        comparisons[spec["id"]] = compare.compare_pair(samples, "A", "B", "A2", 1 - args.fdr, clock)
    decided = verdicts.decide(comparisons, args.fdr, 0.05, max_slowdown=MAX_SLOWDOWN)
    replayed, used = _replay_sequential(args, specs, measured, clock)
    rows, pairs = [], []
    for spec in specs:
        samples = measured.benchmarks[spec["id"]]
        a, b = samples.times("A", clock), samples.times("B", clock)
        pairs.append((a, b))
        result = decided[spec["id"]]
        raw = result["aa"].get("uncalibrated_p_value", result["aa"].get("p_value", 1.0))
        rows.append(
            {
                "k": spec["slowdown_pct"],
                "workload": spec["op"],
                "torchcanary": result["verdict"],
                _family_rule(args): _alone(
                    comparisons, spec["id"], args.fdr / args.family, result["calibration"]
                ),
                ALONE: _alone(comparisons, spec["id"], args.fdr, result["calibration"]),
                "asv": asv_verdict(a, b),
                "pyperf": student_t_verdict(a, b),
                SEQUENTIAL: str(replayed[spec["id"]]["verdict"]),
                "groups_used": used[spec["id"]],
                "measure_s": samples.measure_s,
                "aa_raw_alarm": raw <= args.fdr,
                "mde": result["mde"],
                "calibration": result["calibration"],
            }
        )
    for row, verdict in zip(rows, torch_verdicts(env.python, pairs), strict=True):
        row["torch.utils.benchmark"] = verdict
    return rows


def _replay_sequential(
    args: argparse.Namespace, specs: list[dict[str, Any]], measured: Any, clock: str
) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """The run's sequential verdicts, replayed on samples measured over every group.

    Stopping a benchmark changes nothing about the samples it had, so looking at the first
    g groups of a full measurement is exactly what a sequential run would have seen then.
    """
    run = BenchSettings()  # the looks a run takes by default, but for --first-look
    looks = sequential.look_points(args.groups, args.first_look, run.look_every)
    benchmarks = {s["id"]: measured.benchmarks[s["id"]] for s in specs}
    settled: dict[str, sequential.Stop] = {}
    rule = sequential.StopRule(args.groups, run.min_effect)

    def pair_of(samples: BenchmarkSamples) -> dict[str, Any]:
        return compare.compare_pair(samples, "A", "B", "A2", 1 - args.fdr, clock)

    def decide(comparisons: dict[str, dict[str, Any]], fdr: float) -> dict[str, dict[str, Any]]:
        return verdicts.decide(comparisons, fdr, 0.05, max_slowdown=MAX_SLOWDOWN)

    def seen(groups: int) -> dict[str, BenchmarkSamples]:
        return {
            b: s.first_groups(min(groups, settled[b].groups if b in settled else groups))
            for b, s in benchmarks.items()
        }

    looked = 0
    for groups in looks:
        looked += 1
        settled |= sequential.look(
            seen(groups), groups, settled, pair_of, decide, args.fdr, 0.05, rule
        )
        if len(settled) == len(benchmarks):
            break  # nothing left to measure: the run ends here
    decided, _ = sequential.judge(seen(args.groups), settled, pair_of, decide, args.fdr, looked)
    used = {b: settled[b].groups if b in settled else args.groups for b in benchmarks}
    return decided, used


def _family_rule(args: argparse.Namespace) -> str:
    return f"torchcanary, 1 change in {args.family}"


def _alone(
    comparisons: dict[str, dict[str, Any]], bench_id: str, fdr: float, calibration: float
) -> str:
    """The verdict for one benchmark judged by itself at ``fdr``, the run's calibration kept.

    At the run's FDR this is BH's loosest case. At FDR / N it is the case of a run of N
    where this is the only real change: BH then multiplies its p-value by N.
    """
    judged = verdicts.decide(
        {bench_id: comparisons[bench_id]},
        fdr,
        0.05,
        inflation=calibration,
        max_slowdown=MAX_SLOWDOWN,
    )
    return str(judged[bench_id]["verdict"])


def _share(hits: int, total: int, digits: int = 0) -> str:
    return f"{hits}/{total} = {hits / max(total, 1):.{digits}%}"


def _report(
    args: argparse.Namespace,
    kinds: list[str],
    ks: list[float],
    clock: str,
    rows: list[dict[str, Any]],
) -> None:
    rules = (
        "torchcanary",
        SEQUENTIAL,
        _family_rule(args),
        ALONE,
        "asv",
        "pyperf",
        "torch.utils.benchmark",
    )
    print(
        f"\nclock: {clock}"
        + (" (process CPU time, what clock = auto uses here)" if clock == "cpu" else "")
    )
    print(
        f"  {'rule':<28}{'false alarms (k=0)':>22}"
        + "".join(f"{f'detects {k:g}%':>16}" for k in ks)
    )
    lines = [(rule, rule, kinds) for rule in rules]
    if len(kinds) > 1:  # the workloads behave differently: show ours for each
        lines[1:1] = [(f"  ... {kind} only", "torchcanary", [kind]) for kind in kinds]
    for label, rule, workloads in lines:
        chosen = [r for r in rows if r["workload"] in workloads]
        nulls = [r for r in chosen if r["k"] == 0]
        alarms = sum(str(r[rule]).split(" ")[0] in ("slower", "faster") for r in nulls)
        line = f"  {label:<28}{_share(alarms, len(nulls), 1):>22}"
        for k in ks:
            shifted = [r for r in chosen if r["k"] == k]
            found = sum(str(r[rule]).startswith("slower") for r in shifted)
            line += f"{_share(found, len(shifted)):>16}"
        print(line)
    nulls = [r for r in rows if r["k"] == 0]
    bounds = []
    for rule in ("torchcanary", SEQUENTIAL, _family_rule(args), ALONE):
        alarms = sum(r[rule] in ("slower", "faster") for r in nulls)
        bounds.append(f"{rule} {wilson_upper(alarms, len(nulls)):.2%}")
    print("  false alarms, 95% upper bound: " + "; ".join(bounds))
    for k in ks:
        shifted = [r for r in rows if r["k"] == k]
        bounds = []
        for rule in ("torchcanary", SEQUENTIAL, _family_rule(args), ALONE):
            missed = sum(r[rule] != "slower" for r in shifted)
            bounds.append(f"{rule} {1 - wilson_upper(missed, len(shifted)):.1%}")
        print(f"  {k:g}% detected, 95% lower bound: " + "; ".join(bounds))
    for verdict in ("same", "no-change-detected", "too-noisy"):
        print(
            f"  {verdict}: "
            + ", ".join(
                f"k={k:g}%: {sum(r['torchcanary'] == verdict for r in rows if r['k'] == k)}"
                for k in [0.0, *ks]
            )
        )
    raw_aa = sum(r["aa_raw_alarm"] for r in rows)
    mdes = [r["mde"] for r in rows if r["mde"] is not None]
    low, high = (f(r["calibration"] for r in rows) for f in (min, max))
    factor = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"
    print(
        f"  A/A controls (A vs A2, before calibration) with p <= {args.fdr:g}: "
        f"{_share(raw_aa, len(rows), 1)}; calibration factor from them {factor}"
    )
    if mdes:
        print(
            f"  minimum detectable effect from the A/A controls: median "
            f"{statistics.median(mdes):.1%}, 90th percentile {stats.quantile(mdes, 0.9):.1%}"
        )


# What each layout fills in for the design flags the user left out.
_LAYOUTS: dict[str, dict[str, int]] = {
    "steady": {"rounds": BenchSettings().rounds, "samples": BenchSettings().samples_per_round},
    "oneshot": {"rounds": 1, "samples": 1},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nulls", type=int, default=16, help="benchmarks with k = 0")
    parser.add_argument("--per-k", type=int, default=8, help="benchmarks per k > 0")
    parser.add_argument("--ks", default="2,3,5,10", help="slowdowns in percent")
    # The design defaults are a run's own, so the figures describe what `bench` does.
    run = BenchSettings()
    parser.add_argument(
        "--layout",
        choices=sorted(_LAYOUTS),
        default="steady",
        help="steady: a run's default design; oneshot: 1 sample per side and group",
    )
    parser.add_argument("--groups", type=int, default=run.groups)
    parser.add_argument(
        "--first-look",
        type=int,
        default=run.first_look,
        help="the group after which the sequential rule first looks (a run's first_look)",
    )
    parser.add_argument("--rounds", type=int, help="most rounds per group")
    parser.add_argument(
        "--group-budget-s",
        type=float,
        default=run.group_budget_s,
        help="seconds of samples per benchmark and group, all sides",
    )
    parser.add_argument("--samples", type=int, help="samples per round and side")
    parser.add_argument("--min-sample-ms", type=float, default=run.min_sample_ms)
    parser.add_argument("--fdr", type=float, default=run.fdr)
    parser.add_argument("--workloads", default="busy,matmul")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--family",
        type=int,
        default=len(expand(run, "cpu")),
        help="also judge each benchmark as the only change in a run of this many "
        "(default: as many as a default CPU run has)",
    )
    parser.add_argument("--dump", type=Path, help="write every batch here as JSON, to dig in")
    parser.add_argument(
        "--reanalyse",
        type=Path,
        nargs="+",
        metavar="DUMP",
        help="judge --dump files again instead of measuring (same design flags); "
        "several are judged as separate runs and pooled",
    )
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    args = parser.parse_args()
    for name, value in _LAYOUTS[args.layout].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    ks = [float(k) for k in args.ks.split(",")] if args.per_k else []
    kinds = args.workloads.split(",")
    specs = [workload(kinds[i % len(kinds)], 0.0, i) for i in range(args.nulls)]
    specs += [workload(kinds[i % len(kinds)], k, i) for k in ks for i in range(args.per_k)]
    for spec in specs:
        spec["id"] = benchmark_id(spec)
    env = ensure_environment("baseline", parse_env_spec(args.baseline))
    seed = args.seed or random.SystemRandom().randrange(1, 2**31)
    if args.reanalyse and args.dump:
        parser.error("--dump keeps what is measured, and --reanalyse measures nothing")
    if args.reanalyse:
        runs = [_load(path, specs) for path in args.reanalyse]
    else:
        runs = [_measure(args, env, specs, seed)]
    if args.dump:
        _dump(args.dump, *runs[0])

    source = (
        f"re-judged from {', '.join(map(str, args.reanalyse))}"
        + (" (each its own run, counts pooled)" if len(runs) > 1 else "")
        if args.reanalyse
        else f"load average {os.getloadavg()[0]:.1f} at the end, seed {seed}"
    )
    print(
        f"torchcanary bench harness self-check: {os.cpu_count()} CPUs, {source}, "
        f"torch {env.torch_version}"
    )
    print(
        f"design ({args.layout} layout): {args.groups} worker groups x up to {args.rounds} rounds "
        f"({args.group_budget_s:g} s of samples per group) x {args.samples} samples of >= "
        f"{args.min_sample_ms:g} ms per side; sides A, A2 (A/A control), B (k% heavier); "
        f"workloads {', '.join(kinds)}; {args.nulls} benchmarks at k = 0, {args.per_k} per "
        f"other k"
        + (f", in each of {len(runs)} runs" if len(runs) > 1 else "")
        + f"; FDR {args.fdr:g}"
    )
    by_clock = {}
    for clock in ("cpu", "wall"):
        rows = [row for measured, _ in runs for row in _rows(args, env, specs, measured, clock)]
        _report(args, kinds, ks, clock, rows)
        by_clock[clock] = rows
    _report_time(args, runs, by_clock)


def _report_time(
    args: argparse.Namespace,
    runs: list[tuple[Measurements, float]],
    by_clock: dict[str, list[dict[str, Any]]],
) -> None:
    any_rows = next(iter(by_clock.values()))
    per_bench = [row["measure_s"] for row in any_rows]
    wall = sum(seconds for _, seconds in runs)
    count = len(per_bench)
    print("\ntime to a verdict per benchmark")
    print(
        f"  timed samples, all three sides: median {statistics.median(per_bench):.1f} s, "
        f"max {max(per_bench):.1f} s (A and B alone: about two thirds of that)"
    )
    for clock, rows in by_clock.items():
        # Groups are alike in length, so a benchmark settled after g groups took g/G of it.
        settled = [row["measure_s"] * row["groups_used"] / args.groups for row in rows]
        used = [row["groups_used"] for row in rows]
        print(
            f"  sequential, {clock} clock: median {statistics.median(settled):.1f} s "
            f"({statistics.median(per_bench) / max(statistics.median(settled), 1e-9):.2f}x "
            f"less); groups used: median {statistics.median(used):g} of {args.groups}, "
            f"{sum(g < args.groups for g in used)} of {len(rows)} settled early"
        )
    print(
        f"  wall for the whole run incl. worker starts and calibration: {wall:.0f} s for "
        f"{count} benchmarks = {wall / count:.1f} s each"
    )


if __name__ == "__main__":
    main()
