"""The settings counterfactual on candidates whose cause is known by construction: the
same interpreter as the baseline with one setting changed (``ATEN_CPU_CAPABILITY=default``:
torch's CPU kernels without vector instructions, which makes a cache-resident copy about
twice as slow; a 1M-element copy is bound by memory, so the setting barely moves it and
the share it would be judged by, over a delta near zero, is noise), and one slowed by
something outside every setting it reads (a busy thread started by ``sitecustomize``)."""

from __future__ import annotations

import time
from pathlib import Path

from torchcanary.explain.cause import ExplainStatus
from torchcanary.explain.counterfactual import counterfactual
from torchcanary.explain.job import ExplainJob
from torchcanary.explain.section import EXPLAINED_WIDTH, combine
from torchcanary.explain.settings import ExplainSettings
from torchcanary.explain.shares import MATERIAL
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding
from torchcanary.worker.calls import EXPLAIN_STEADY

_COPY = {"kind": "copy", "dtype": "float32", "numel": 32_768}  # 128 KiB: in cache


def _finding() -> Finding:
    remeasure = {"call": EXPLAIN_STEADY, "kwargs": {"spec": _COPY, "threads": 1, "count": 5}}
    return Finding("bench", "copy/fp32", "timing", "+150 %", remeasure=remeasure)


def _job(make_context, baseline_env, repeats: int = 7) -> ExplainJob:
    ctx = make_context(sections=("bench",))
    ctx.environments["candidate"] = baseline_env  # the same torch: only the setting differs
    view = load_run_view(ctx.store, ctx.run_id)
    return ExplainJob(ctx, view, ExplainSettings(repeats=repeats), time.monotonic() + 600)


MISS = 0.05  # how far a 95 % interval may end short of the truth before the test fails


def test_a_candidate_slower_by_one_setting_is_explained_by_that_setting(
    make_context, baseline_env
) -> None:
    job = _job(make_context, baseline_env)  # 7 rounds: 5 leave the verdict's interval wide
    finding = _finding()
    part = counterfactual(job, finding, env_of={"candidate": {"ATEN_CPU_CAPABILITY": "default"}})
    explanation = combine(finding, [part], [], 0.0)
    named = {cause.name: cause for cause in explanation.causes if cause.kind == "setting"}
    assert {"cpu_capability", "env:ATEN_CPU_CAPABILITY"} <= set(named)
    # The truth: setting it back recovers all of the loss. A 95 % interval misses the truth
    # one time in twenty by design (three intervals here: seen once under load, the
    # unexplained one ending at -0.017), so each must reach within MISS of the truth; a
    # setting that recovered half of the loss still fails by far.
    for cause in named.values():
        assert cause.share is not None and cause.share_low is not None
        assert cause.share_high is not None
        assert cause.share_low - MISS <= 1.0 <= cause.share_high + MISS, cause
        assert "recovers" in cause.evidence and cause.reproduce
    assert explanation.unexplained_low is not None and explanation.unexplained_high is not None
    assert explanation.unexplained_low - MISS <= 0.0 <= explanation.unexplained_high + MISS
    # "explained" also needs the unexplained interval tight; how tight seven rounds get
    # depends on the machine's noise, so the verdict is checked against that rule.
    width = explanation.unexplained_high - explanation.unexplained_low
    tight = width <= EXPLAINED_WIDTH
    assert explanation.verdict is (ExplainStatus.EXPLAINED if tight else ExplainStatus.PARTLY)


def test_a_cause_outside_the_settings_is_reported_unexplained(
    make_context, baseline_env, tmp_path: Path
) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "sitecustomize.py").write_text(
        "import threading\n"
        "def _spin():\n"
        "    while True:\n"
        "        sum(range(1000))\n"
        "threading.Thread(target=_spin, daemon=True).start()\n"
    )
    # 5 rounds: the busy thread's slowdown varies with what else the machine runs, and one
    # round where it hardly slowed the candidate leaves 3 rounds unable to tell it from 0
    # (then nothing is shared out, rightly); 5 still tell it apart. A decoy that recovered
    # the loss would show a share near 1 in every round, its low end above MATERIAL; one
    # that does nothing clears MATERIAL only by a fluke far rarer than its interval's 2.5 %.
    job = _job(make_context, baseline_env, repeats=5)
    finding = _finding()
    # A harmless setting differs too, so something is measured and found not to help.
    env = {"PYTHONPATH": str(busy), "TORCH_SHOW_CPP_STACKTRACES": "1"}
    part = counterfactual(job, finding, env_of={"candidate": env})
    explanation = combine(finding, [part], [], 0.0)
    found = [c for c in explanation.causes if c.name == "env:TORCH_SHOW_CPP_STACKTRACES"]
    assert found, (explanation.not_checked, explanation.extra)  # the slowdown was reproduced
    decoy = found[0]
    print("decoy", decoy.describe(), explanation.extra["settings"])
    assert decoy.share_low is not None and decoy.share_low < MATERIAL
    assert explanation.unexplained_high is not None and explanation.unexplained_high >= 0.75
    assert explanation.verdict is ExplainStatus.UNEXPLAINED
