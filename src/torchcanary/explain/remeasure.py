"""How explain takes one more sample of a finding: the way its section gave, or, for a
user's workload (which the bench hands over without one), a way explain adds.

A workload is steady: the same call as the bench's other steady kinds, its spec and thread
count as the bench ran it, builds the user's step (compiled, where it ran compiled) in a
fresh worker and times it. That lets the settings counterfactual try the confounds it can
set back (the CPU capability) and the flipped config defaults on the workloads themselves;
it spends the explain budget like every other arm (no round starts past it).
"""

from __future__ import annotations

from typing import Any

from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import COMPILE, WORKLOAD
from torchcanary.worker.calls import EXPLAIN_STEADY

SAMPLES = 5  # samples per measurement, their median the arm's value (as the bench's kinds)


def remeasure_of(finding: Finding) -> dict[str, Any] | None:
    """The worker call that measures ``finding`` once more; None where none exists."""
    if finding.remeasure is not None:
        return finding.remeasure
    spec = finding.facts.get("spec")
    if finding.facts.get("kind") != WORKLOAD or not isinstance(spec, dict):
        return None
    threads = int(finding.facts.get("threads") or 1)
    return {"call": EXPLAIN_STEADY, "kwargs": {"spec": spec, "threads": threads, "count": SAMPLES}}


def compiled(finding: Finding) -> bool:
    """Whether the finding times code ``torch.compile`` made (its config values can move it)."""
    spec = finding.facts.get("spec")
    kind = finding.facts.get("kind")
    return kind == COMPILE or (
        kind == WORKLOAD and isinstance(spec, dict) and spec.get("mode") == "compile"
    )
