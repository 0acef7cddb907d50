"""Records a bench workload's torch calls: its setup and a few of its steps, untimed.

Started as ``python -m`` this module with the workload's spec (JSON, as the bench validated
it) and ``TORCHCANARY_RECORD_CALLS=<folder>``, in a process of its own under the baseline:
the bench's timed samples never run under the recording modes. The target is loaded and
seeded as the bench does (``worker/bench/user_workload``), then built and its step called
``STEPS`` times eagerly (a compiled workload's calls are the ones its code makes as written;
each distinct call is kept once, so more steps would add nothing).
"""

from __future__ import annotations

import json
import sys

from torchcanary.worker.bench.user_workload import UserCodeFailed, load_target, seed_everything
from torchcanary.worker.replay.record import start_from_environment

STEPS = 2


def record(spec: dict[str, object]) -> None:
    """Build the workload and run its step while the recording is on."""
    target = load_target(str(spec["target"]))
    recording = start_from_environment()
    if recording is None:
        raise UserCodeFailed("TORCHCANARY_RECORD_CALLS is not set; nothing would be recorded")
    params = spec.get("params") or {}
    with recording:
        seed_everything()  # after the recording's own seed: the bench's numbers, the bench's model
        step = target(**params) if isinstance(params, dict) else target()
        if not callable(step):
            raise UserCodeFailed(f"{spec['target']} returned {type(step).__name__}, not a step")
        for _ in range(STEPS):
            step()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m torchcanary.worker.replay.record_workload SPEC_JSON")
        return 2
    try:
        record(json.loads(args[0]))
    except UserCodeFailed as exc:
        print(f"torchcanary: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
