"""The main job's wall time on two source trees, as a ratio measured under the same load.

On a shared machine an absolute figure says more about the neighbours than about the code,
so this runs ``torchcanary run`` from the tree before a change and from the tree after it,
interleaved (before, after, then after, before, ...), and prints each run's sections and
the ratio after / before of their medians. Every run is a new candidate against a warm
environment cache: before each one the cache's kept facts (claim verdicts, drill
references, dispatch profiles, rooflines, surfaces) are put back as a snapshot holding the
baseline's only, so neither tree finds anything kept for the candidate. Usage:

    python benchmarks/main_job_ratio.py --before /path/to/old/checkout --cache DIR \\
        --snapshot DIR [--after .] [--pairs 2] [--candidate "torch==2.14.0 numpy"]

``--cache`` is a TORCHCANARY_CACHE whose ``envs`` hold both environments already (a link
to the user's is fine); ``--snapshot`` the kept folders to restore before every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

KEPT = ("claim-verdicts", "drill-references", "dispatch-profiles", "rooflines", "surfaces")


def _restore(cache: Path, snapshot: Path) -> None:
    for name in KEPT:
        shutil.rmtree(cache / name, ignore_errors=True)
        if (snapshot / name).is_dir():
            shutil.copytree(snapshot / name, cache / name)


def _verdicts(stored: dict[str, Any]) -> str:
    """The run's decision and how its claims and benchmarks came out, to compare trees."""
    claims = Counter(
        (claim.get(role) or {}).get("outcome", {}).get("verdict", "-")
        for claim in stored.get("claims", [])
        for role in ("baseline", "candidate")
    )
    bench = Counter(row["verdict"] for row in stored.get("sections", {}).get("bench", []))
    return f"{stored.get('decision')}; claims {dict(claims)}; bench {dict(bench)}"


def _run(tree: Path, cache: Path, candidate: str) -> tuple[dict[str, float], str]:
    """One main job from ``tree``'s sources: its wall time and the seconds it stored, and
    its verdicts."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "TORCHCANARY_CACHE": str(cache)}
    command = [sys.executable, "-m", "torchcanary.cli", "run", "--quiet", "--candidate", candidate]
    with tempfile.TemporaryDirectory(prefix="canary-ratio-") as scratch:
        started = time.monotonic()
        code = subprocess.run(command, cwd=scratch, env=env, stdout=subprocess.DEVNULL).returncode
        wall = time.monotonic() - started
        results = Path(scratch) / "canary-results" / "latest" / "results.json"
        stored = json.loads(results.read_text()) if results.is_file() else {}
    seconds = (stored.get("decision_detail") or {}).get("seconds", {})
    return {"wall": wall, "exit": float(code), **seconds}, _verdicts(stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the old tree (a checkout)")
    parser.add_argument("--after", type=Path, default=Path("."), help="the new tree [.]")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--snapshot", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--candidate", default="torch==2.14.0 numpy")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    for pair in range(args.pairs):
        order = ("before", "after") if pair % 2 == 0 else ("after", "before")
        for label in order:
            _restore(args.cache, args.snapshot)
            figures, verdicts = _run(trees[label], args.cache, args.candidate)
            runs[label].append(figures)
            parts = ", ".join(f"{k} {v:.0f}" for k, v in figures.items() if k not in ("exit",))
            print(
                f"pair {pair + 1} {label:>6}: exit {figures['exit']:.0f}; {parts} "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            print(f"{'':14}{verdicts}", flush=True)
    parts = [k for k in runs["before"][0] if k != "exit"]
    print(f"\n{'part':12} {'before s':>9} {'after s':>9} {'after/before':>13}")
    for part in parts:
        before = statistics.median(r.get(part, 0.0) for r in runs["before"])
        after = statistics.median(r.get(part, 0.0) for r in runs["after"])
        ratio = f"{after / before:.2f}" if before else "-"
        print(f"{part:12} {before:9.1f} {after:9.1f} {ratio:>13}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
