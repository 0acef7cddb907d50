"""Store figures for the note, both engines side by side in one run:

- write throughput (results/s) of one run, and of 4 runs writing concurrently, each result
  committed at once as a run's sections commit them (a probe result and its measurement in
  one transaction);
- ``history`` query time over a store holding 1,000 runs.

    .venv/bin/python benchmarks/store_throughput.py [--results 500] [--runs 1000]
        [--postgres postgresql://USER@HOST/DB]

Without ``--postgres`` it starts a throwaway PostgreSQL server (the tests' one, from
tests/pg_cluster.py, with fsync on) and stops it at the end. SQLite is a file in a
temporary directory. Each writer is its own process and starts at the same instant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchcanary.claims.records import save_probe_result
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.store.base import ResultStore
from torchcanary.store.history import HistoryFilter, history
from torchcanary.store.location import open_store, redact

TESTS = Path(__file__).parents[1] / "tests"
BENCHES_PER_RUN = 20
PROBES_PER_RUN = 30


def write(location: str, count: int, start_at: float) -> None:
    """One writer: a run of ``count`` results; prints its first and last commit times."""
    with open_store(location) as store:
        run_id = store.create_run({"baseline": "torch==2.13.0", "candidate": "torch==2.14.1"})
        time.sleep(max(0.0, start_at - time.time()))
        began = time.time()
        for index in range(count):
            outcome = Outcome(Verdict.CONFIRMED, "ok", {"i": index}, {"s": [float(index)]})
            save_probe_result(
                store, ProbeResult(run_id, "candidate", f"p{index:05d}", outcome, 0.01, time.time())
            )
        print(json.dumps({"began": began, "ended": time.time()}))


def throughput(location: str, writers: int, count: int) -> float:
    """Results per second, all writers together, from the common start to the last commit."""
    start_at = time.time() + 3.0  # after every writer has imported and connected
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--writer", location, str(count), str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(writers)
    ]
    spans = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"a writer failed on {redact(location)}")
        spans.append(json.loads(out))
    began = min(span["began"] for span in spans)
    return writers * count / (max(span["ended"] for span in spans) - began)


def populate(store: ResultStore, runs: int) -> None:
    """``runs`` finished runs, each with 20 benchmarks and 30 claims in both environments."""
    day = 86400.0
    start = time.time() - runs * day
    rows: dict[str, list[tuple[object, ...]]] = {
        "runs": [],
        "environments": [],
        "probe_results": [],
        "section_results": [],
    }
    for number in range(runs):
        run_id = f"bench-{number:05d}"
        created = start + number * day
        candidate = f"2.{14 + number % 3}.{number % 5}"
        rows["runs"].append(
            (run_id, created, created + 600, "finished", "{}", "go", '{"reasons": []}')
        )
        for role, version in (("baseline", "2.13.0"), ("candidate", candidate)):
            rows["environments"].append(
                (run_id, role, f"torch=={version}", "python3", version, 1.0, 1, "{}")
            )
            for probe in range(PROBES_PER_RUN):
                rows["probe_results"].append(
                    (run_id, role, f"probe.{probe}", "confirmed", "ok", "{}", 0.1, created)
                )
        for bench in range(BENCHES_PER_RUN):
            ratio = 1.0 + (number % 7) / 100
            payload = json.dumps({"ratio": ratio, "ci_low": ratio - 0.01, "ci_high": ratio + 0.01})
            rows["section_results"].append(
                (run_id, "bench", f"bench.{bench}", "both", "same", payload, created)
            )
    for table, table_rows in rows.items():
        store.insert_rows(table, table_rows)


def history_seconds(store: ResultStore, repeats: int = 7) -> dict[str, float]:
    """Median seconds of a benchmark's and a claim's whole history, and a filtered one."""
    cases = {
        "bench, all runs": ("bench.7", "bench", HistoryFilter()),
        "claim, all runs": ("probe.3", "claims", HistoryFilter()),
        "bench, candidate 2.15": ("bench.7", "bench", HistoryFilter(candidate="2.15")),
    }
    timings = {}
    for name, (item, section, run_filter) in cases.items():
        samples = []
        for _ in range(repeats):
            began = time.perf_counter()
            found = history(store, item, section, run_filter)
            samples.append(time.perf_counter() - began)
        assert found, name
        timings[name] = statistics.median(samples)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=500, help="results per run (500)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent runs (4)")
    parser.add_argument("--runs", type=int, default=1000, help="runs in the history store")
    parser.add_argument("--postgres", help="an existing server's URL (default: start one)")
    parser.add_argument("--writer", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        write(args.writer[0], int(args.writer[1]), float(args.writer[2]))
        return 0

    cluster = None
    if args.postgres is None:
        sys.path.insert(0, str(TESTS))
        from pg_cluster import PostgresCluster

        cluster = PostgresCluster(fsync=True)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            locations = {
                "sqlite": lambda name: str(Path(scratch) / f"{name}.db"),
                "postgresql": lambda name: (
                    cluster.new_database() if cluster else _fresh(args.postgres, name)
                ),
            }
            report(locations, args)
    finally:
        if cluster is not None:
            cluster.destroy()
    return 0


def _fresh(url: str, name: str) -> str:
    """A new database beside ``url``'s, so each measurement starts from an empty store."""
    import psycopg

    database = f"canary_bench_{name}_{int(time.time())}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {database}")  # type: ignore[arg-type]
    return url.rsplit("/", 1)[0] + "/" + database


def _analyze(url: str) -> None:
    """Table statistics, as autovacuum would gather them soon after a bulk load."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("ANALYZE")


def report(locations: dict, args: argparse.Namespace) -> None:
    figures: dict[str, dict[str, float]] = {}
    for engine, make in locations.items():
        one = throughput(make("one"), 1, args.results)
        many = throughput(make("many"), args.writers, args.results)
        location = make("history")
        with open_store(location) as store:
            began = time.perf_counter()
            populate(store, args.runs)
            filled = time.perf_counter() - began
            if engine == "postgresql":
                _analyze(location)
            figures[engine] = {
                "write, 1 run (results/s)": one,
                f"write, {args.writers} runs at once (results/s)": many,
                f"fill {args.runs} runs (s)": filled,
            } | {f"history, {k} (ms)": v * 1000 for k, v in history_seconds(store).items()}
    print(f"{'':42}{'sqlite':>12}{'postgresql':>12}")
    for name in figures["sqlite"]:
        cells = "".join(f"{figures[e][name]:>12.1f}" for e in figures)
        print(f"{name:42}{cells}")
    print(
        f"({args.results} results per run, each committed at once; history over "
        f"{args.runs} runs x {BENCHES_PER_RUN} benchmarks x {PROBES_PER_RUN} claims x 2 "
        "environments, median of 7)"
    )


if __name__ == "__main__":
    sys.exit(main())
