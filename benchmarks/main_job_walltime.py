"""Wall time of the main job, cold (environments built from scratch) and warm (cached).

Prints both figures and the claim verdicts the run produced. Usage:

    python benchmarks/main_job_walltime.py            # cold then warm, every section
    python benchmarks/main_job_walltime.py --warm-only --only claims
    python benchmarks/main_job_walltime.py --keep /tmp/walltime-results   # keep the runs

Cold uses a fresh, temporary TORCHCANARY_CACHE (and fresh uv and pip download caches), so
it measures what a new machine pays.
Each line also says where the run's time went (environments, manifests, each section), as
the run stored it. The load average at the start and end is printed: on a shared machine a
figure taken under load is not the machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(workdir: Path, cache: Path | None, extra: list[str]) -> tuple[float, int, Path]:
    env = dict(os.environ)
    if cache is not None:
        env["TORCHCANARY_CACHE"] = str(cache)
        # The installers' own download caches start empty too, as on a new machine.
        env["UV_CACHE_DIR"] = str(cache / "uv")
        env["PIP_CACHE_DIR"] = str(cache / "pip")
    started = time.monotonic()
    code = subprocess.run(
        [sys.executable, "-m", "torchcanary.cli", "run", "--quiet", *extra],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
    ).returncode
    elapsed = time.monotonic() - started
    # Resolved now: the next run moves "latest".
    latest = (workdir / "canary-results" / "latest").resolve() / "results.json"
    return elapsed, code, latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-only", action="store_true")
    parser.add_argument("--only", help="sections to run, e.g. claims,bench")
    parser.add_argument(
        "--keep", type=Path, help="copy the runs' results folder here, for a closer look"
    )
    args = parser.parse_args()
    extra = ["--only", args.only] if args.only else []
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="canary-walltime-") as scratch:
        workdir = Path(scratch)
        cache = workdir / "cache" if not args.warm_only else None
        figures = []
        if not args.warm_only:
            figures.append(("cold", *_run(workdir, cache, extra)))
        figures.append(("warm", *_run(workdir, cache, extra)))
        for label, seconds, code, latest in figures:
            spent = json.loads(latest.read_text())["decision_detail"].get("seconds", {})
            parts = ", ".join(f"{part} {taken:.0f} s" for part, taken in spent.items())
            print(f"{label:>5}: {seconds:7.1f} s  (exit {code}; {parts})")
        results = json.loads(figures[-1][3].read_text())
        if args.keep:
            shutil.copytree(workdir / "canary-results", args.keep, dirs_exist_ok=True)
    print(f"\n{'probe':40} {'baseline':20} {'candidate':20} upgrade")
    for claim in results["claims"]:
        base = (claim["baseline"] or {}).get("outcome", {}).get("verdict", "-")
        cand = (claim["candidate"] or {}).get("outcome", {}).get("verdict", "-")
        print(f"{claim['probe_id']:40} {base:20} {cand:20} {claim['comparison']}")
    bench = results["sections"].get("bench", [])
    if bench:
        print(f"\n{'benchmark':48} {'verdict':20} groups")
    for row in bench:
        harness = row["payload"].get("harness", {})
        groups = f"{harness.get('groups_measured', '-')} of {harness.get('groups', '-')}"
        print(f"{row['key'][:48]:48} {row['verdict']:20} {groups}")
    print(f"\ndecision: {results['decision']}")
    for reason in (results.get("decision_detail") or {}).get("reasons", []):
        print(f"  - {reason}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
