"""How long `torchcanary publish` takes over a store of many runs, full and incremental.

    PYTHONPATH=src python benchmarks/publish_site.py [--runs 100] [--store-dir DIR]

Fills a temporary SQLite store with RUNS recorded runs (candidates x two hardware profiles,
each a claim, a benchmark and a drill, written through the store API as tests/site_helpers
does, no torch), publishes it into an empty folder (full), adds one more run and publishes
into the same folder again (incremental: only that run's page, its items' histories, the
overview and the regressions are made again). Prints both times, their ratio, and how many
pages each made.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).parents[1] / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="stored runs before (default 100)")
    parser.add_argument("--store-dir", type=Path, help="where the store and site go (temporary)")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    from site_helpers import T0, fill_qualification
    from torchcanary.publish.site import publish
    from torchcanary.store.location import open_store

    with tempfile.TemporaryDirectory(dir=args.store_dir) as scratch:
        folder = Path(scratch)
        with open_store(str(folder / "canary.db")) as store:
            for index in range(args.runs):
                fill_qualification(
                    store,
                    f"2.14.{index // 20}rc{index % 20}",
                    ("h100-8x", "mi300-8x")[index % 2],
                    ratio=1.2 if index % 7 == 3 else 1.0,
                    fleet=True,
                    created_at=T0 + 3600 * index,
                )
            started = time.perf_counter()
            full = publish(store, folder / "site")
            full_s = time.perf_counter() - started
            fill_qualification(
                store, "2.15.0rc1", "h100-8x", fleet=True, created_at=T0 + 3600 * args.runs
            )
            started = time.perf_counter()
            incremental = publish(store, folder / "site")
            incremental_s = time.perf_counter() - started
    print(f"full publish of {args.runs} runs: {full_s:.2f} s ({len(full.rendered)} pages made)")
    print(
        f"incremental publish after one more run: {incremental_s:.3f} s "
        f"({len(incremental.rendered)} pages made, {incremental.kept} unchanged)"
    )
    print(f"ratio full / incremental: {full_s / incremental_s:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
