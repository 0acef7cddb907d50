"""The bench's collectives with one rank on each of N Ray nodes: algbw and busbw per op.

    PYTHONPATH=src python benchmarks/fleet_collectives.py [--nodes 2] [--address HOST:PORT]
        [--backend gloo] [--role candidate]

Without ``--address`` it starts a real Ray cluster here on 127.0.0.1 (a head with no CPU
and N one-CPU nodes), so the "network" is loopback. busbw follows nccl-tests' PERFORMANCE.md
(all_reduce 2(n-1)/n, all_gather / reduce_scatter (n-1)/n, broadcast 1). ``--backend nccl``
on GPU nodes takes each node's first GPU: not checked here (no GPU node).
"""

from __future__ import annotations

import argparse

from torchcanary.fleet.local_cluster import start_local_cluster, stop_local_cluster
from torchcanary.fleet.node_collectives import collectives_across_nodes
from torchcanary.fleet.ray_executor import connect
from torchcanary.plan import RunPlan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--role", default="candidate", choices=("baseline", "candidate"))
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--address", default="", help="a Ray cluster to use instead of one here")
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    plan = RunPlan(baseline=args.baseline, candidate=args.candidate, sections=("bench",))
    cluster = None
    address = args.address
    if not address:
        cluster = start_local_cluster(["head"] + [f"n{i}" for i in range(args.nodes)], head_cpus=0)
        address = cluster.address
    try:
        with connect(address, timeout_s=60) as fleet:
            figures = collectives_across_nodes(
                fleet, plan.to_json(), args.role, args.nodes, backend=args.backend
            )
    finally:
        if cluster is not None:
            stop_local_cluster(cluster)
    print(f"| op | bytes | us/op | algbw GB/s | busbw GB/s | ({args.nodes} nodes, {args.backend})")
    print("|---|---|---|---|---|")
    for f in figures:
        if f.skipped:
            print(f"| {f.op} | {f.bytes} | skipped: {f.skipped[:80]} | | |")
        else:
            assert f.seconds is not None and f.algbw_gbps is not None and f.busbw_gbps is not None
            row = f"{f.seconds * 1e6:.0f} | {f.algbw_gbps:.3f} | {f.busbw_gbps:.3f}"
            print(f"| {f.op} | {f.bytes} | {row} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
