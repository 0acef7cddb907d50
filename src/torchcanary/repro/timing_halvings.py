"""What ``--reduce`` halves in a slower benchmark's script: a linear's or a matrix
product's sizes (every one at once, then each alone), then the kernel calls per timed
sample. A fresh import of torch and a user's workload (whose params mean what the user's
code makes of them) have only their loop count, where they have one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from torchcanary.repro.timing_script import loops as loops_of
from torchcanary.section_types import Finding

# the sizes of each kind's spec a script builds its tensors from
_SIZES = {"linear": ("batch", "k", "n"), "gemm": ("m", "k", "n")}
_LOOPED = ("linear", "gemm", "workload")  # kinds whose sample times a loop of calls


def timing_halvings(finding: Finding) -> Iterator[tuple[str, Finding]]:
    """Each smaller version of a slower benchmark's finding, with what was halved."""
    facts = finding.facts
    spec = facts["spec"]
    names = [name for name in _SIZES.get(facts["kind"], ()) if int(spec[name]) > 1]
    for group in ([names] if len(names) > 1 else []) + [[name] for name in names]:
        smaller = {**spec, **{name: int(spec[name]) // 2 for name in group}}
        what = ", ".join(f"{name} {spec[name]} -> {smaller[name]}" for name in group)
        yield what, replace(finding, facts={**facts, "spec": smaller})
    loops = loops_of(facts)
    if facts["kind"] in _LOOPED and loops > 1:
        what = f"loops {loops} -> {loops // 2}"
        yield what, replace(finding, facts={**facts, "loops": loops // 2})
