"""How long a unit's Slurm job may run when the site sets no time limit.

Without ``--time`` a job gets the partition's default, which on many sites is an hour or
less: a long section is killed (TIMEOUT) and fails the same way on every resume. So each
unit asks for a limit derived from an estimate of its own length: the longest of the same
unit's (section and profile) last successful runs in the store (its ledger rows keep the
seconds each took), or ``FIRST_ESTIMATE_S`` when the store has none. The limit is
``MULTIPLE`` times the estimate, at least ``FLOOR_S`` (a node slower on the day, a cold
environment cache), in whole minutes, and never above the partition's MaxTime (a job
asking more would wait forever). ``[fleet.slurm] time`` or ``--slurm-args --time`` replace
it for every unit.
"""

from __future__ import annotations

import math

from torchcanary.report_kit.ledger import LEDGER_SECTION
from torchcanary.store.base import ResultStore

MULTIPLE = 3.0
FLOOR_S = 30 * 60.0
# A unit the store has never seen finish: an hour, so its limit is three.
FIRST_ESTIMATE_S = 60 * 60.0
# How many of the newest runs the store is searched in, and how many finishes count.
HISTORY_RUNS = 50
HISTORY_FINISHES = 5
UNIT_SECONDS = "unit_seconds"  # the ledger row's field: how long the unit ran


def unit_estimate(store: ResultStore, profile: str, section: str, run_id: str) -> float | None:
    """The longest of ``section``'s last finishes on ``profile`` in the store's other runs
    (seconds), or None when it never finished there."""
    scoped = store.scoped("", profile)
    found: list[float] = []
    for run in reversed(store.runs()[-HISTORY_RUNS:]):
        if run.run_id == run_id:
            continue
        for row in scoped.section_results(run.run_id, LEDGER_SECTION):
            seconds = row.payload.get(UNIT_SECONDS)
            if row.key == section and row.verdict == "ok" and isinstance(seconds, int | float):
                found.append(float(seconds))
        if len(found) >= HISTORY_FINISHES:
            break
    return max(found) if found else None


def limit_minutes(estimate_s: float | None, max_minutes: int | None) -> int:
    """The unit's limit in whole minutes: ``MULTIPLE`` x the estimate (``FIRST_ESTIMATE_S``
    when None), at least ``FLOOR_S``, at most the partition's ``max_minutes``."""
    seconds = max(FLOOR_S, MULTIPLE * (FIRST_ESTIMATE_S if estimate_s is None else estimate_s))
    minutes = math.ceil(seconds / 60)
    return minutes if max_minutes is None else min(minutes, max_minutes)
