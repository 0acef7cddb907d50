"""Arms a rank of the user's DDP job to be struck inside its backward pass.

Worker side: standard library, and torch once armed. For ``kill-in-backward`` the drill sets
``TORCHCANARY_DRILL_BACKWARD_STRIKE=RANK:STEP``; on that rank's first launch the shim calls
:func:`arm` before the job starts. Every ``DistributedDataParallel`` forward then hooks the
gradient of its output; the first time that gradient arrives after the rank reported step
``STEP``, the hook writes a ``backward`` event and waits there, inside ``loss.backward()``,
for the drill's SIGKILL. The rank's peers are then in the same step's backward, in or on
their way to its gradient all-reduce: the moment a rank lost mid-step leaves them in.
"""

from __future__ import annotations

import os
import time
from typing import Any

from torchcanary.worker.drill import job_inplace, job_report

BACKWARD_VARIABLE = "TORCHCANARY_DRILL_BACKWARD_STRIKE"
HOLD_S = 60.0  # the drill strikes within a poll; past this the job goes on (and the drill says)


def arm() -> bool:
    """Hook DDP's forward on the rank the drill names (first launch only); True if armed."""
    rank, _, step = os.environ.get(BACKWARD_VARIABLE, "").partition(":")
    first_launch = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if not step or os.environ.get("RANK") != rank or not first_launch:
        return False
    if os.environ.get(job_inplace.JOIN_VARIABLE):  # a replacement is never the one struck
        return False
    from torch.nn.parallel import DistributedDataParallel

    after = int(step)
    original = DistributedDataParallel.forward
    fired = False

    def strike(grad: Any) -> Any:
        nonlocal fired
        if not fired:
            fired = True
            job_report.emit("backward", step=int(job_report.last_step or 0) + 1)
            time.sleep(HOLD_S)
        return grad

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        if not fired and (job_report.last_step or -1) >= after:
            first = output[0] if isinstance(output, (tuple, list)) else output
            if getattr(first, "requires_grad", False):
                first.register_hook(strike)
        return output

    DistributedDataParallel.forward = forward  # type: ignore[method-assign]
    return True
