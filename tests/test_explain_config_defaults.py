"""Flipped config defaults as candidate causes of a compiled workload's slowdown, measured
in a real run of the settings counterfactual: the candidate is the baseline's interpreter
with two config defaults flipped at start-up (a ``sitecustomize`` the settings snapshot
does not see, as a new release's defaults are not an environment variable). One flip,
``torch._dynamo.config.disable``, leaves the workload uncompiled: its step's Python loop,
folded into a constant when Dynamo traces it, then runs on every call (about 10x slower).
The other, ``suppress_errors``, changes nothing this workload does. Pinning the first back
must undo the change; pinning the second must not.

The workload compiles with the ``eager`` backend: Dynamo's tracing is the part the flip
moves, and no C++ compile makes each fresh worker slow.
"""

from __future__ import annotations

import time
from pathlib import Path

from torchcanary.explain.counterfactual import NO_EFFECT, UNDOES, counterfactual
from torchcanary.explain.job import ExplainJob
from torchcanary.explain.section import combine
from torchcanary.explain.settings import ExplainSettings
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding

_LOOP = """
import torch


def make_step():
    x = torch.ones(8)

    def step():
        total = 0
        for i in range(2000):
            total += i * i
        return x + total

    return step
"""
_FLIPS = {"disable": (False, True), "suppress_errors": (False, True)}


def _flipped(name: str) -> Finding:
    """The diff's finding for one flipped default of ``torch._dynamo.config``."""
    symbol = f"torch._dynamo.config.{name}"
    before, after = _FLIPS[name]
    facts = {"change": "default-changed", "symbol": symbol, "baseline": before, "candidate": after}
    return Finding("diff", f"default-changed:{symbol}", "change", "", facts=facts)


def test_a_flipped_default_is_pinned_back_on_a_compiled_workload_and_a_harmless_one_is_not(
    make_context, baseline_env, tmp_path: Path
) -> None:
    site = tmp_path / "flipped"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import torch._dynamo\n"
        + "".join(f"torch._dynamo.config.{n} = {after}\n" for n, (_, after) in _FLIPS.items())
    )
    (tmp_path / "loop_workload.py").write_text(_LOOP)
    spec = {
        "kind": "workload",
        "target": f"{tmp_path / 'loop_workload.py'}:make_step",
        "mode": "compile",
        "compile": {"backend": "eager"},
        "device": "cpu",
    }
    finding = Finding(
        "bench", "workload/loop/cpu", "timing", "+900 %", facts={"kind": "workload", "spec": spec}
    )
    ctx = make_context(sections=("bench", "diff"))
    ctx.environments["candidate"] = baseline_env  # the same torch: only the defaults differ
    view = load_run_view(ctx.store, ctx.run_id)
    changes = [_flipped(name) for name in _FLIPS]
    job = ExplainJob(ctx, view, ExplainSettings(repeats=3), time.monotonic() + 600, changes)
    part = counterfactual(job, finding, env_of={"candidate": {"PYTHONPATH": str(site)}})
    explanation = combine(finding, [part], [], 0.0)
    print(explanation.extra["settings"], [c.describe() for c in explanation.causes])
    causes = {cause.name: cause for cause in explanation.causes}
    assert set(causes) == {f"config:torch._dynamo.config.{name}" for name in _FLIPS}
    fired = causes["config:torch._dynamo.config.disable"]
    assert explanation.causes[0] is fired
    assert fired.detail["effect"] == UNDOES, fired
    assert "go, with it pinned to the baseline's value" in fired.evidence
    harmless = causes["config:torch._dynamo.config.suppress_errors"]
    assert harmless.detail["effect"] == NO_EFFECT, harmless
    assert "not the cause" in harmless.evidence
