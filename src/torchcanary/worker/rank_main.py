"""One rank of :func:`torchcanary.worker.multirank.run_ranks`: join, call, answer, leave."""

from __future__ import annotations

import datetime
import importlib
import json
import sys
import traceback


def main() -> None:
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
    try:
        dist.destroy_process_group()
    except Exception:
        pass  # a group left broken by the probe is the probe's finding, not ours


if __name__ == "__main__":
    main()
