"""Figures for the surface diff: counts per kind, every changed default, and the time taken.

    PYTHONPATH=src python benchmarks/surface_diff.py [--code PATH] [--notes FILE]

Runs the diff section for real (a worker in each cached environment) into a scratch store
and prints counts of changes per kind (all, and unannounced), every changed default with
both values, and how long the section and each environment's collection took.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from torchcanary.context import RunContext
from torchcanary.diff import section
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.runner import import_root
from torchcanary.store.rows import SUMMARY_KEY
from torchcanary.store.sqlite import SqliteStore

SEED_NOTES = Path("/work/shared/seed/pytorch-2.14-release.txt")


def _print_figures(rows: list, section_s: float) -> None:
    summary = next(r for r in rows if r.key == SUMMARY_KEY)
    payload = summary.payload
    print(f"torch {payload['torch_versions']}; section wall time {section_s:.1f} s")
    for role, timings in payload["timings_s"].items():
        print(f"  {role} collection: {timings}")
    print("\n| kind | all | unannounced |\n|---|---|---|")
    for kind, count in payload["counts"].items():
        print(f"| {kind} | {count} | {payload['unannounced_counts'][kind]} |")
    print(f"\ntotal {payload['total']}, announced {payload['announced']}, hits {payload['hits']}")
    print("\nchanged defaults (baseline -> candidate):")
    for row in rows:
        if row.verdict == "default-changed":
            mark = "announced" if row.payload["announced"] else "unannounced"
            print(
                f"  {row.payload['symbol']}: {row.payload['baseline']!r} -> "
                f"{row.payload['candidate']!r} ({mark})"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--code", default="", help="user sources to scan")
    parser.add_argument("--notes", action="append", default=None, help="notes file(s)")
    args = parser.parse_args()
    notes = args.notes if args.notes is not None else [str(SEED_NOTES)] * SEED_NOTES.is_file()
    table: dict[str, object] = {"notes": notes}
    if args.code:
        table["code"] = args.code
    settings = section.parse_settings(table)
    environments = {
        role: ensure_environment(role, parse_env_spec(spec))
        for role, spec in (("baseline", args.baseline), ("candidate", args.candidate))
    }
    with (
        tempfile.TemporaryDirectory(prefix="surface-diff-") as scratch,
        SqliteStore(Path(scratch) / "canary.db") as store,
    ):
        plan = RunPlan(
            baseline=args.baseline,
            candidate=args.candidate,
            sections=("diff",),
            settings={"diff": settings},
        )
        ctx = RunContext(
            run_id=store.create_run(plan.to_json()),
            store=store,
            plan=plan,
            environments=environments,
            import_root=import_root(plan, Path(scratch)),
            work_dir=Path(scratch),
            progress=Progress(),
        )
        started = time.monotonic()
        try:
            section.run(ctx)
        finally:
            ctx.close_workers()
        _print_figures(
            store.section_results(ctx.run_id, section.SECTION), time.monotonic() - started
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
