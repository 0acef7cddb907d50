"""One rank of :func:`torchcanary.worker.multirank.run_ranks`: join, call, answer, leave."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import sys
import traceback
from typing import Any

from torchcanary.worker.ending import end_now
from torchcanary.worker.lifeline import die_with_parent


def serve(spec: dict[str, Any]) -> None:
    """Be one rank of ``spec``: in a fresh interpreter, or in a child forked by run_ranks."""
    die_with_parent()
    if spec.get("cpus") and hasattr(os, "sched_setaffinity"):
        # The parent may be pinned to one core; ranks of a collective each need their own.
        os.sched_setaffinity(0, spec["cpus"])
    import torch.distributed as dist

    dist.init_process_group(
        spec["backend"], init_method="env://", timeout=datetime.timedelta(seconds=spec["timeout_s"])
    )
    if spec.get("joined"):  # run_ranks asks: it tells a group that never formed from one
        with open(spec["joined"], "w"):  # that broke afterwards
            pass
    module_name, _, attr = spec["target"].partition(":")
    target = getattr(importlib.import_module(module_name), attr)
    try:
        value = target(dist.get_rank(), dist.get_world_size(), **spec["kwargs"])
        answer = {"value": value}
    except Exception as exc:
        traceback.print_exc()
        answer = {
            "value": {
                "raised": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc()[-4000:],
            }
        }
    with open(spec["out"], "w") as out:
        json.dump(answer, out, default=str)
    # A group left broken by the target is the target's finding, not ours.
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def main() -> None:
    serve(json.loads(sys.argv[1]))
    end_now()  # answered and out of the group, as a forked rank ends


if __name__ == "__main__":
    main()
