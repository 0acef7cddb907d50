"""Wall time of the main job: cold, warm, and a new candidate against a warm cache.

Prints the three figures and the claim verdicts the run produced. Usage:

    python benchmarks/main_job_walltime.py            # cold, warm, new candidate; every section
    python benchmarks/main_job_walltime.py --warm-only --only claims
    python benchmarks/main_job_walltime.py --keep /tmp/walltime-results   # keep the runs
    python benchmarks/main_job_walltime.py --dry-run  # say what would run, run nothing

Cold uses a fresh, temporary TORCHCANARY_CACHE (and fresh uv and pip download caches), so
it measures what a new machine pays. Warm repeats the same run: everything kept is reused
(claim verdicts, drill references, dispatch profiles, rooflines), the best case. The case
a team meets every week is the third: a new candidate (a nightly, an rc; by default
torch 2.14.0, on the package mirror) against the same baseline with the cache warm, where
only the baseline's side can be reused and the candidate's environment is built. Before it,
whatever the cache holds of that candidate from an earlier invocation (its environment, its
kept verdicts and facts) is deleted, so it is new each time.
Each line also says where the run's time went (environments, manifests, each section), as
the run stored it, and what it reused. The load average at the start and end is printed:
on a shared machine a figure taken under load is not the machine's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NEW_CANDIDATE = "torch==2.14.0 numpy"


@dataclass(frozen=True)
class Figure:
    """One timed run: what it was, how long it took, and where its results are."""

    label: str
    seconds: float
    code: int
    results: Path


def _environment(cache: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if cache is not None:
        env["TORCHCANARY_CACHE"] = str(cache)
        # The installers' own download caches start empty too, as on a new machine.
        env["UV_CACHE_DIR"] = str(cache / "uv")
        env["PIP_CACHE_DIR"] = str(cache / "pip")
    return env


def _command(extra: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "torchcanary.cli", "run", "--quiet", *extra]


def _kept_for(ingredients: object, spec: str) -> bool:
    """Whether a kept result's ingredients name an environment built from ``spec``: as a
    ``spec`` field, or at the end of an identity "path|python|torch|spec" (a drill's)."""
    if isinstance(ingredients, str):
        return ingredients.endswith(f"|{spec}")
    if isinstance(ingredients, dict):
        return ingredients.get("spec") == spec or any(
            _kept_for(value, spec) for value in ingredients.values()
        )
    if isinstance(ingredients, list):
        return any(_kept_for(value, spec) for value in ingredients)
    return False


def forget_new_candidate(cache: Path, spec: str) -> int:
    """Delete what the cache holds from earlier runs of ``spec``: its environment (built
    again from the installer's warm download cache) and its kept claim verdicts, bench facts,
    drill reference and diff surface. A second invocation of this benchmark would otherwise
    time a candidate that is no longer new. The number of kept results deleted."""
    from torchcanary.envs.cache import MARKER

    for marker in (cache / "envs").glob(f"*/{MARKER}"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(marker.read_text()).get("spec") == spec:
                shutil.rmtree(marker.parent)
    forgotten = 0
    for folder in (path for path in cache.iterdir() if path.is_dir() and path.name != "envs"):
        for entry in folder.glob("*.json"):
            try:
                ingredients = json.loads(entry.read_text()).get("ingredients")
            except (OSError, ValueError, AttributeError):
                continue
            if _kept_for(ingredients, spec):
                entry.unlink()
                forgotten += 1
    return forgotten


def _run(workdir: Path, cache: Path | None, label: str, extra: tuple[str, ...]) -> Figure:
    started = time.monotonic()
    code = subprocess.run(
        _command(extra), cwd=workdir, env=_environment(cache), stdout=subprocess.DEVNULL
    ).returncode
    elapsed = time.monotonic() - started
    # Resolved now: the next run moves "latest".
    latest = (workdir / "canary-results" / "latest").resolve() / "results.json"
    return Figure(label, elapsed, code, latest)


def _reused(workdir: Path, run_id: str) -> str:
    """What the run kept from earlier runs, read back from its store as summary.md says it."""
    from torchcanary.report.markdown import reused_text
    from torchcanary.report.view import load_run_view
    from torchcanary.store.location import open_store

    with open_store(workdir / "canary-results" / "canary.db", create=False) as store:
        return reused_text(load_run_view(store, run_id)) or "Reused from earlier runs: nothing."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-only", action="store_true", help="skip the cold run")
    parser.add_argument("--only", help="sections to run, e.g. claims,bench")
    parser.add_argument(
        "--new-candidate",
        default=NEW_CANDIDATE,
        help=f"the new candidate timed against the warm cache (default {NEW_CANDIDATE!r})",
    )
    parser.add_argument(
        "--keep", type=Path, help="copy the runs' results folder here, for a closer look"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the runs, run nothing")
    args = parser.parse_args()
    extra = ("--only", args.only) if args.only else ()
    planned = [
        *([] if args.warm_only else [("cold", extra)]),
        ("warm", extra),
        ("new candidate", (*extra, "--candidate", args.new_candidate)),
    ]
    if args.dry_run:
        where = "the user's cache" if args.warm_only else "a fresh temporary cache"
        for label, argv in planned:
            print(f"{label:>13}: {shlex.join(_command(argv))}  ({where})")
        return
    from torchcanary.envs.cache import cache_root

    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="canary-walltime-") as scratch:
        workdir = Path(scratch)
        cache = workdir / "cache" if not args.warm_only else None
        figures = []
        for label, argv in planned:
            if label == "new candidate":
                forgotten = forget_new_candidate(cache or cache_root(), args.new_candidate)
                print(
                    f"new candidate: its environment and {forgotten} results kept from "
                    "earlier runs of it deleted, so it is new"
                )
            figures.append(_run(workdir, cache, label, argv))
        for figure in figures:
            stored = json.loads(figure.results.read_text())
            spent = (stored["decision_detail"] or {}).get("seconds", {})
            parts = ", ".join(f"{part} {taken:.0f} s" for part, taken in spent.items())
            print(f"{figure.label:>13}: {figure.seconds:7.1f} s  (exit {figure.code}; {parts})")
            print(f"{'':>13}  {_reused(workdir, stored['run']['run_id'])}")
        warm = next(f for f in figures if f.label == "warm")  # the main job's own verdicts
        results = json.loads(warm.results.read_text())
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
