"""One rank of :func:`torchcanary.worker.multirank.run_ranks`: join, call, answer, leave."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import sys
import traceback

from torchcanary.worker.lifeline import die_with_parent


def main() -> None:
    die_with_parent()
    spec = json.loads(sys.argv[1])
    import torch.distributed as dist

    dist.init_process_group(
        spec["backend"], init_method="env://", timeout=datetime.timedelta(seconds=spec["timeout_s"])
    )
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


if __name__ == "__main__":
    main()
