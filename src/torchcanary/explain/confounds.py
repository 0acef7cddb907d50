"""The confounds the run itself names (build facts on which the two environments differ
besides torch's version: build variant, CPU capability, threads, libraries) as candidate
causes of a slower timing.

A confound that can be set back (the CPU capability through ``ATEN_CPU_CAPABILITY``, the
thread count through ``torch.set_num_threads``) is tried by the settings counterfactual
wherever the finding can be measured again on its own (``counterfactual.py``: it reads
the same settings in both environments' workers). Where it cannot be tried (the finding has
no way to be measured alone, or the fact is a property of the build), it is named here as
an untested candidate with the reason, and linked to the ops the explanation names (a CPU
capability, a thread count or a math library changes how fast every CPU kernel runs).
Nothing here measures: a confound's share is not known, so it has none.
"""

from __future__ import annotations

from typing import Any

from torchcanary.explain.cause import Cause
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.explain.remeasure import remeasure_of
from torchcanary.section_types import Finding

CONFOUND = "confound"
# The confounds the settings counterfactual can set back, with how.
SETTABLE = {
    "cpu_capability": "ATEN_CPU_CAPABILITY",
    "torch_num_threads": "torch.set_num_threads",
}
# The confounds that move how fast CPU kernels run (linked to the ops named), most direct
# first: the order candidates are named in.
KERNEL_FACTS = ("cpu_capability", "torch_num_threads", "blas", "mkldnn_version", "openmp")


def _rank(key: str) -> int:
    return KERNEL_FACTS.index(key) if key in KERNEL_FACTS else len(KERNEL_FACTS)


def candidates(confounds: dict[str, tuple[Any, Any]], remeasurable: bool) -> list[Cause]:
    """Each confound not tried by the counterfactual, as an untested candidate (ranked:
    those that move CPU kernels first), with why it was not tried."""
    causes = []
    for key in sorted(confounds, key=lambda k: (_rank(k), k)):
        if key in SETTABLE and remeasurable:
            continue  # the settings counterfactual sets it back and measures it
        baseline, candidate = confounds[key]
        why = (
            f"it can be set back ({SETTABLE[key]}), but this finding cannot be measured "
            "again on its own"
            if key in SETTABLE
            else "a property of the build: nothing sets it back inside one environment"
        )
        causes.append(
            Cause(
                CONFOUND,
                key,
                evidence=f"the run names it: {baseline} vs {candidate}; untested: {why}",
                detail={"kernels": key in KERNEL_FACTS},
            )
        )
    return causes


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    found = candidates(job.view.confounds(), remeasure_of(finding) is not None)
    return Contribution(tuple(found))


def applies(finding: Finding) -> bool:
    return finding.kind == "timing"


EXPLAINER: Explainer = FunctionExplainer(CONFOUND, applies, explain, measures=False)
