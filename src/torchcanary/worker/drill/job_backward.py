"""Arms a rank of the user's DDP job to be struck inside its backward pass.

Worker side: standard library, and torch once armed. For ``kill-in-backward`` the drill sets
``TORCHCANARY_DRILL_BACKWARD_STRIKE=RANK:STEP:GO_FILE``; on that rank's first launch the shim
calls :func:`arm` before the job starts. Every ``DistributedDataParallel`` forward then hooks
the gradient of its output; the first time that gradient arrives once the step is reached,
the hook writes a ``backward`` event and waits there, inside ``loss.backward()``, for the
drill's SIGKILL. The rank's peers are then in the same step's backward, in or on their way
to its gradient all-reduce: the moment a rank lost mid-step leaves them in.

The step is reached when the rank itself reported ``STEP``, or, for a job that logs on
another rank only (most log on rank 0), when ``GO_FILE`` exists: the drill makes it once the
rank that logs has reported ``STEP``. That rank then names the step struck, not this one.
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
    rank, _, rest = os.environ.get(BACKWARD_VARIABLE, "").partition(":")
    step, _, go_file = rest.partition(":")
    first_launch = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if not step or os.environ.get("RANK") != rank or not first_launch:
        return False
    if os.environ.get(job_inplace.JOIN_VARIABLE):  # a replacement is never the one struck
        return False
    from torch.nn.parallel import DistributedDataParallel

    after = int(step)
    original = DistributedDataParallel.forward
    fired = False

    def reached() -> bool:
        own = job_report.last_step
        return (own is not None and own >= after) or bool(go_file and os.path.exists(go_file))

    def strike(grad: Any) -> Any:
        nonlocal fired
        if not fired and reached():  # checked here, in backward: the latest moment to know
            fired = True
            own = job_report.last_step
            # The step struck, when this rank reports its steps; else the drill works it out.
            job_report.emit("backward", step=None if own is None else int(own) + 1)
            time.sleep(HOLD_S)
        return grad

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        if not fired:
            first = output[0] if isinstance(output, (tuple, list)) else output
            if getattr(first, "requires_grad", False):
                first.register_hook(strike)
        return output

    DistributedDataParallel.forward = forward  # type: ignore[method-assign]
    return True
