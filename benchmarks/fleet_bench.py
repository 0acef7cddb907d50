"""``torchcanary bench --fleet ADDR --nodes N`` against the same collectives on one machine.

    PYTHONPATH=src python benchmarks/fleet_bench.py [--nodes 2] [--groups 4] [--address HOST:PORT]

Without ``--address`` it starts a real Ray cluster here on 127.0.0.1 (a head with no CPU
and N one-CPU nodes), so the "network" is loopback. It runs the real command line twice in a
scratch folder, both with only the collectives family, no A/A control and no interim looks:
across N nodes (one rank per node), then on this machine (N ranks). It prints each op's
busbw per side (nccl-tests' formulas: all_reduce 2(n-1)/n, all_gather / reduce_scatter
(n-1)/n, broadcast 1), the verdicts, and the wall time of each command with their ratio (the
cost of going through the fleet, including its environment checks on each node).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The local Ray cluster is the tests' (tests/local_cluster.py).
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
SIZES = (2**20, 2**23)


def _config(nodes: int, groups: int) -> str:
    return (
        'sections = ["bench"]\n[bench]\nfamilies = ["collectives"]\n'
        f"groups = {groups}\naa_control = false\nsequential = false\n"
        f"[bench.collectives]\nops = {list(OPS)}\nbytes = {list(SIZES)}\n"
        f'world_sizes = [{nodes}]\nbackend = "gloo"\n'
    ).replace("'", '"')


def _bench(folder: Path, flags: list[str]) -> tuple[float, dict[str, Any]]:
    """The command's wall time and its results.json."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "torchcanary.cli", "bench", "--quiet", *flags],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"torchcanary bench {' '.join(flags)} exited {done.returncode}:\n{done.stderr[-2000:]}"
        )
    results = json.loads((folder / "canary-results" / "latest" / "results.json").read_text())
    return wall, results


def _bench_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    profiles = (results.get("fleet") or {}).get("profiles") or {}
    run = next(iter(profiles.values())) if profiles else results
    return list((run.get("sections") or {}).get("bench", []))


def _print(title: str, wall: float, results: dict[str, Any]) -> None:
    print(f"\n{title}: {wall:.1f} s wall")
    print("| benchmark | verdict | ratio | busbw GB/s baseline | busbw GB/s candidate |")
    print("|---|---|---|---|---|")
    for row in _bench_rows(results):
        payload = row.get("payload") or {}
        bandwidth = payload.get("collective_bandwidth") or {}
        busbw = [
            f"{bandwidth[role]['busbw_bytes_per_s'] / 1e9:.3f}" if role in bandwidth else "-"
            for role in ("baseline", "candidate")
        ]
        ratio = payload.get("ratio")
        shown = f"{ratio:.3f}" if isinstance(ratio, float) else "-"
        print(f"| {row['key']} | {row['verdict']} | {shown} | {busbw[0]} | {busbw[1]} |")
        if payload.get("reason"):
            print(f"|   why: {payload['reason'][:300]} | | | | |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--address", default="", help="a Ray cluster to use instead of one here")
    parser.add_argument("--nodes-only", action="store_true", help="skip the run on this machine")
    args = parser.parse_args()
    from local_cluster import start_local_cluster, stop_local_cluster

    cluster = None
    address = args.address
    if not address:
        # One profile for every node: ranks on nodes of different profiles are refused.
        cluster = start_local_cluster(["head"] + ["bench-node"] * args.nodes, head_cpus=0)
        address = cluster.address
    try:
        with tempfile.TemporaryDirectory() as scratch:
            across, local = Path(scratch, "across"), Path(scratch, "local")
            for folder in (across, local):
                folder.mkdir()
                (folder / "canary.toml").write_text(_config(args.nodes, args.groups))
            fleet_wall, fleet_results = _bench(
                across, ["--fleet", address, "--nodes", str(args.nodes)]
            )
            local_wall, local_results = _bench(local, []) if not args.nodes_only else (1.0, {})
    finally:
        if cluster is not None:
            stop_local_cluster(cluster)
    _print(f"across {args.nodes} Ray nodes (one rank each)", fleet_wall, fleet_results)
    _print(f"on this machine ({args.nodes} ranks)", local_wall, local_results)
    print(f"\nwall time across nodes / here: {fleet_wall / local_wall:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
