"""Fault drills; ``report_step`` is the one call a user's own job makes for a drill to see it."""

from torchcanary.drills.job_report import report_step

__all__ = ["report_step"]
