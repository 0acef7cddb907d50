"""One writer per kind of finding (``Finding.kind``, as ``Section.reproducible`` names it),
each turning a finding into a :class:`~torchcanary.repro.reproducer.Reproducer`."""

from __future__ import annotations

from collections.abc import Callable

from torchcanary.repro.call_script import call_reproducer
from torchcanary.repro.changed_test_script import changed_test_reproducer
from torchcanary.repro.drill_script import drill_reproducer
from torchcanary.repro.probe_script import probe_reproducer
from torchcanary.repro.reproducer import Reproducer
from torchcanary.repro.timing_script import timing_reproducer
from torchcanary.section_types import Finding

WRITERS: dict[str, Callable[[Finding], Reproducer]] = {
    "call": call_reproducer,
    "timing": timing_reproducer,
    "test": changed_test_reproducer,
    "probe": probe_reproducer,
    "fault": drill_reproducer,
}


def writer_for(finding: Finding) -> Callable[[Finding], Reproducer] | None:
    """The writer of the finding's kind; None when no writer knows it."""
    return WRITERS.get(finding.kind)
