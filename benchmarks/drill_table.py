"""Measure every fault drill in the baseline and the candidate and print the table.

    PYTHONPATH=src python benchmarks/drill_table.py [--faults all] [--parallel fsdp] [--ranks 3]
        [--html out.html] [--job "tests/fixtures/drill_jobs/ddp_dcp.py --ckpt-dir {scratch}/c"]
    PYTHONPATH=src python benchmarks/drill_table.py --nodes 2 --faults \
        kill:restart-unshared,kill:timeout,hang:timeout,net-down:timeout,net-slow:none,node-kill:timeout

Runs the drill section for real (torchrun, gloo ranks, namespaces) into a scratch store and
prints the section's Markdown; the figures are the drills' own measurements, one run each,
in the data-parallel mode given (every drill, the in-place ones too, runs that mode).
With ``--job`` the same drills run on that job too, and its table follows the built-in one.

With ``--nodes N`` the same drills (same job, seeds, steps and fault step) also run with one
rank on each of N nodes of a real Ray cluster started here (a head that holds no work and N
one-CPU nodes per environment, since node-kill kills one), as ``torchcanary drill --fleet
ADDR --nodes N`` does, and the table sets them next to the one-machine run. As root, every
node runs in a network namespace of its own on a private bridge, so the link faults cut or
slow a real veth between nodes; otherwise the nodes are on 127.0.0.1 and the link faults
come out not-checkable. All nodes share this machine's clock, CPUs and disk, so those
figures show the cost of the fleet's machinery (torchrun per node, rendezvous over TCP on a
veth, Ray), not of a real network.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchcanary.context import RunContext
from torchcanary.drill import report, section
from torchcanary.envs.cache import Environment, ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.view import load_run_view
from torchcanary.runner import execute, import_root
from torchcanary.store.sqlite import SqliteStore

# The local Ray cluster is the tests' (tests/local_cluster.py).
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--faults", default="all", help="'all' or comma-separated drills")
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the built-in job")
    parser.add_argument("--html", type=Path, default=None)
    parser.add_argument("--job", default="", help="also drill this script (see docs/drills.md)")
    parser.add_argument("--nodes", type=int, default=0, help="also across this many Ray nodes")
    args = parser.parse_args()
    faults = "all" if args.faults == "all" else args.faults.split(",")
    environments = {
        role: ensure_environment(role, parse_env_spec(spec))
        for role, spec in (("baseline", args.baseline), ("candidate", args.candidate))
    }
    jobs = [("built-in", "")] + ([("job", args.job)] * bool(args.job))
    tables = {}
    for title, job in jobs:
        print(f"# {title}: {job or 'the tiny GPT'}")
        settings = section.parse_settings(
            {"faults": faults, "parallel": args.parallel, "job": job, "ranks": args.ranks}
        )
        html_path = (
            args.html if not job or args.html is None else args.html.with_suffix(".job.html")
        )
        tables[title] = _table(args, environments, settings, html_path)
    if args.nodes:
        tables[f"{args.nodes} nodes"] = _across_nodes(args, faults)
    if len(tables) > 1:
        print(_side_by_side(tables))
    return 0


def _cell(result: Any) -> str:
    """verdict, detection, resumption and steps lost of one drill in one environment."""
    if result is None:
        return "–"
    payload = result.payload

    def seconds(key: str) -> str:
        value = payload.get(key)
        return f"{value:.1f}s" if isinstance(value, (int, float)) else "–"

    if result.key.endswith(":none"):  # ran on through the fault: its pace, before and after
        before, after = payload.get("throughput_before"), payload.get("throughput_after")
        pace = "–" if before is None or after is None else f"{before:.1f} -> {after:.1f}"
        return f"{result.verdict} steps/s {pace}"
    lost = payload.get("steps_lost")
    return (
        f"{result.verdict} d {seconds('detect_s')} r {seconds('resume_s')} "
        f"lost {'–' if lost is None else lost}"
    )


def _side_by_side(tables: dict[str, dict[tuple[str, str], Any]]) -> str:
    """One Markdown table: a row per drill, a column per job and environment."""
    titles = list(tables)
    keys = sorted({key for table in tables.values() for key, _ in table})
    header = ["drill"] + [f"{t} / {role}" for t in titles for role in ("baseline", "candidate")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in keys:
        cells = [
            _cell(tables[t].get((key, role))) for t in titles for role in ("baseline", "candidate")
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(["", "## Side by side (d: detect, r: resume, lost: steps)", *lines])


def _table(
    args: argparse.Namespace,
    environments: dict[str, Environment],
    settings: dict[str, Any],
    html_path: Path | None,
) -> dict[tuple[str, str], Any]:
    with (
        tempfile.TemporaryDirectory(prefix="drill-table-") as scratch,
        SqliteStore(Path(scratch) / "canary.db") as store,
    ):
        plan = RunPlan(
            baseline=args.baseline,
            candidate=args.candidate,
            sections=("drill",),
            settings={"drill": settings},
        )
        run_id = store.create_run(plan.to_json())
        ctx = RunContext(
            run_id=run_id,
            store=store,
            plan=plan,
            environments=environments,
            import_root=import_root(plan, Path(scratch)),
            work_dir=Path(scratch),
            progress=Progress(),
        )
        started = time.monotonic()
        section.run(ctx)
        view = load_run_view(store, run_id)
        print(report.markdown(view))
        for line in section.blocking_reasons(view, {}):
            print(f"no-go: {line}")
        print(
            f"({time.monotonic() - started:.0f} s for {len(settings['faults'])} drills "
            "in both environments)"
        )
        if html_path is not None:
            html_path.write_text(report.html(view))
        return {
            (r.key, r.env_role): r
            for r in view.sections.get("drill", [])
            if not r.key.startswith("reference:")
        }


def _across_nodes(args: argparse.Namespace, faults: Any) -> dict[tuple[str, str], Any]:
    """The built-in job's drills with one rank on each of ``args.nodes`` local Ray nodes."""
    from local_cluster import (
        start_bridged_cluster,
        start_local_cluster,
        stop_local_cluster,
    )
    from torchcanary.drill.across_nodes import NodeDrillWork
    from torchcanary.drill.netns import why_unavailable
    from torchcanary.fleet.across_nodes import NodesVenue
    from torchcanary.fleet.ray_connect import connect

    plan = RunPlan(
        baseline=args.baseline,
        candidate=args.candidate,
        sections=("drill",),
        settings={"drill": {"faults": faults, "parallel": args.parallel}},
    )
    roles = ("baseline", "candidate")
    names = [f"{role}-{i}" for role in roles for i in range(args.nodes)]
    why = why_unavailable(need_tc=True)
    print(f"nodes on 127.0.0.1, link faults not checkable: {why}" if why else "nodes in namespaces")
    bridged = None if why else start_bridged_cluster(names)
    cluster = start_local_cluster(["head", *names], head_cpus=0) if why else None
    address = bridged.address if bridged else cluster.address
    try:
        with (
            tempfile.TemporaryDirectory(prefix="drill-table-nodes-") as scratch,
            SqliteStore(Path(scratch) / "canary.db") as store,
            connect(address, timeout_s=60) as fleet,
        ):
            # Each node here is labelled a profile of its own: a mix, named as such.
            venue = NodesVenue(NodeDrillWork(fleet, address, args.nodes, mixed=True))
            outcome = execute(plan, store, Path(scratch) / "out", Progress(), venue)
            view = load_run_view(store, outcome.run_id)
            return {(r.key, r.env_role): r for r in view.sections["drill"]}
    finally:
        left = bridged.stop() if bridged else stop_local_cluster(cluster)
        if left:
            print(f"Ray processes left behind: {left}")


if __name__ == "__main__":
    sys.exit(main())
