"""How torchcanary's own in-environment processes end once their answer is out.

After ``import torch`` the interpreter's teardown walks the 165,000 to 180,000 objects the
garbage collector then tracks and runs every C++ destructor: 0.5 s of CPU here, a quarter of
a worker's life, spent after the last answer and waited out by whoever closes the process.
No caller asks about it, and in a rank a backend's thread can abort the process there. So
a worker, a rank, a drill job of ours, a replay child and a one-shot sample end with
``os._exit`` once their output is flushed and their files closed. Whatever they started
dies with their session (the orchestrator kills it, ``envs/worker_process.py``). A user's
own code (a job, a test suite) always ends its own way.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def end_now(code: int = 0) -> NoReturn:
    """Flush what was written and end without the interpreter's teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
