"""Fault drills; ``report_step`` is the one call a user's own job makes for a drill to see
it, and ``in_place_drill`` with its ``report_*`` calls the contract for a job that recovers
in place (``worker/drill/job_inplace.py``). A user's job imports this package inside its
environment, so it names only in-environment modules."""

from torchcanary.worker.drill.job_inplace import (
    in_place_drill,
    report_recovered,
    report_recovering,
    report_unsupported,
)
from torchcanary.worker.drill.job_report import report_step

__all__ = [
    "in_place_drill",
    "report_recovered",
    "report_recovering",
    "report_step",
    "report_unsupported",
]
