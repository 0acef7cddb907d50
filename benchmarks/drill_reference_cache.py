"""What the on-disk cache of a user's job's fault-free run saves, per drill and environment.

    PYTHONPATH=src python benchmarks/drill_reference_cache.py \
        [--job "tests/fixtures/drill_jobs/ddp_dcp.py --ckpt-dir {scratch}/c"] \
        [--fault kill:restart-unshared] [--repeats 1]

In each environment, one drill of the job is run twice by two fresh runners sharing an
empty cache folder: the first makes the fault-free run and keeps it, the second reuses it.
Prints each wall time and the saving (the fault-free run's own time, plus its start-up).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from torchcanary.drill.catalog import DrillSpec, parse_drill_name
from torchcanary.drill.kept_references import KeptReferences
from torchcanary.drill.settings import parse_settings
from torchcanary.drill.user_runner import UserJobRunner
from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import import_root_for


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="torch==2.13.0 numpy")
    parser.add_argument("--candidate", default="torch==2.14.1 numpy")
    parser.add_argument(
        "--job", default="tests/fixtures/drill_jobs/ddp_dcp.py --steps 10 --ckpt-dir {scratch}/c"
    )
    parser.add_argument("--fault", default="kill:restart-unshared")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    job = parse_settings({"job": args.job}).user_job()
    assert job is not None
    spec = DrillSpec(*parse_drill_name(args.fault), at_step=4, timeout_s=5.0)
    print(f"job: {args.job}\ndrill: {spec.key}\n")
    print("| environment | repeat | without cache (s) | with cached reference (s) | saved (s) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        root = import_root_for(("torchcanary",), Path(scratch) / "import-root")
        for role, text in (("baseline", args.baseline), ("candidate", args.candidate)):
            env = ensure_environment(role, parse_env_spec(text))
            for repeat in range(args.repeats):
                cache = KeptReferences(Path(scratch) / f"cache-{role}-{repeat}")
                times, verdicts = [], []
                for attempt in ("made", "cached"):
                    work = Path(scratch) / f"work-{role}-{repeat}-{attempt}"
                    runner = UserJobRunner(env.python, env.path, root, work, job, cache, role)
                    started = time.monotonic()
                    outcome = runner.run(spec)
                    times.append(time.monotonic() - started)
                    verdicts.append(outcome.verdict.value)
                    reference = runner.references()[0]
                    assert ("cached" in reference) == (attempt == "cached"), reference
                made, cached = (f"{t:.1f} ({v})" for t, v in zip(times, verdicts, strict=True))
                saved = times[0] - times[1]
                print(
                    f"| {role} ({env.torch_version}) | {repeat + 1} | {made} | {cached} "
                    f"| {saved:.1f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
