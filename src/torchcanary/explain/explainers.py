"""Every explainer, in the order they are tried on a finding.

An explainer is a module of this package exposing ``EXPLAINER`` (``job.Explainer``); a new
way to explain (ops and kernels, compile phases) adds its module and one line here.
"""

from __future__ import annotations

from torchcanary.explain import (
    compile_phases,
    confounds,
    counterfactual,
    ops,
    startup,
    tracebacks,
)
from torchcanary.explain.job import Explainer

EXPLAINERS: tuple[Explainer, ...] = (
    startup.EXPLAINER,
    counterfactual.EXPLAINER,
    tracebacks.EXPLAINER,
    ops.EXPLAINER,
    compile_phases.EXPLAINER,
    confounds.EXPLAINER,
)
