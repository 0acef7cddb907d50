"""Measure every fault drill in the baseline and the candidate and print the table.

    PYTHONPATH=src python benchmarks/drill_table.py [--faults all] [--parallel fsdp]
        [--html out.html]

Runs the drill section for real (torchrun, gloo ranks, namespaces) into a scratch store and
prints the section's Markdown; the figures are the drills' own measurements, one run each,
in the data-parallel mode given (every drill, the in-place ones too, runs that mode).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from torchcanary.context import RunContext
from torchcanary.drills import report, section
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.view import RunView
from torchcanary.runner import import_root
from torchcanary.store.sqlite import Store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument("--faults", default="all", help="'all' or comma-separated drills")
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--html", type=Path, default=None)
    args = parser.parse_args()
    faults = "all" if args.faults == "all" else args.faults.split(",")
    settings = section.parse_settings({"faults": faults, "parallel": args.parallel})
    environments = {
        role: ensure_environment(role, parse_env_spec(spec))
        for role, spec in (("baseline", args.baseline), ("candidate", args.candidate))
    }
    with (
        tempfile.TemporaryDirectory(prefix="drill-table-") as scratch,
        Store(Path(scratch) / "canary.db") as store,
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
        view = RunView.load(store, run_id)
        print(report.markdown(view))
        for line in section.blocking_reasons(view, {}):
            print(f"no-go: {line}")
        print(
            f"({time.monotonic() - started:.0f} s for {len(settings['faults'])} drills "
            "in both environments)"
        )
        if args.html is not None:
            args.html.write_text(report.html(view))
    return 0


if __name__ == "__main__":
    sys.exit(main())
