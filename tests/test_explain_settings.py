"""The settings counterfactual on candidates whose cause is known by construction: the
same interpreter as the baseline with one setting changed (``ATEN_CPU_CAPABILITY=default``:
torch's CPU kernels without vector instructions, which makes a user's workload, a sigmoid
of a cache-resident tensor, several times slower; a memory-bound one would barely move and
the share it would be judged by, over a delta near zero, would be noise), and one slowed
by something outside every setting it reads (a busy thread started by ``sitecustomize``).
The workload is measured again through the path explain adds for workloads, on one
thread, so in CPU time: in wall time under this machine's load the capability, set back,
left x1.14 and x2.13 of a x6-x7 change in two runs (the load's share, not the setting's).
"""

from __future__ import annotations

import time
from pathlib import Path

from torchcanary.explain.cause import ExplainStatus, Explanation
from torchcanary.explain.confounds import candidates
from torchcanary.explain.counterfactual import NO_EFFECT, REDUCES, UNDOES, counterfactual, effect
from torchcanary.explain.job import ExplainJob
from torchcanary.explain.remeasure import remeasure_of
from torchcanary.explain.section import EXPLAINED_WIDTH, combine
from torchcanary.explain.settings import ExplainSettings
from torchcanary.explain.shares import MATERIAL
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding
from torchcanary.worker.calls import EXPLAIN_STEADY

_SIGMOID = """
import torch


def make_step():
    x = torch.linspace(-4, 4, 32_768)  # 128 KiB: in cache

    def step():
        return torch.sigmoid(x)

    return step
"""


def _finding(folder: Path) -> Finding:
    """A user's workload at one thread, as the bench hands it over (no way to measure it
    again: explain adds one)."""
    (folder / "sigmoid_workload.py").write_text(_SIGMOID)
    target = f"{folder / 'sigmoid_workload.py'}:make_step"
    spec = {"kind": "workload", "target": target, "device": "cpu"}
    facts = {"kind": "workload", "spec": spec, "threads": 1}
    return Finding("bench", "workload/sigmoid/cpu", "timing", "+500 %", facts=facts)


def _job(make_context, baseline_env, repeats: int = 7) -> ExplainJob:
    ctx = make_context(sections=("bench",))
    ctx.environments["candidate"] = baseline_env  # the same torch: only the setting differs
    view = load_run_view(ctx.store, ctx.run_id)
    return ExplainJob(ctx, view, ExplainSettings(repeats=repeats), time.monotonic() + 600)


MISS = 0.05  # how far a 95 % interval may end short of the truth before the test fails


def test_an_arm_undoes_the_change_only_when_the_change_left_holds_0_and_its_share_is_material():
    reproduced_all = (1.0, 0.8, 1.2)
    assert effect(reproduced_all, (0.0, -0.02, 0.03)) == UNDOES
    assert effect(reproduced_all, (0.05, 0.02, 0.08)) == REDUCES  # a change is left
    assert effect((0.5, 0.3, 0.7), (0.1, 0.05, 0.15)) == REDUCES
    # a noisy arm whose change holds 0 but that did not measurably move it undoes nothing
    assert effect((0.4, -0.5, 1.3), (0.05, -0.2, 0.3)) == NO_EFFECT
    assert effect(None, (0.0, -0.1, 0.1)) == NO_EFFECT  # no share: nothing claimed


def _explain_known_setting(make_context, baseline_env, folder: Path) -> Explanation:
    job = _job(make_context, baseline_env, repeats=5)
    finding = _finding(folder)
    part = counterfactual(job, finding, env_of={"candidate": {"ATEN_CPU_CAPABILITY": "default"}})
    return combine(finding, [part], [], 0.0)


def test_a_workload_is_measured_again_as_the_bench_measures_its_steady_kinds() -> None:
    """The bench hands a workload over without a way to measure it again; explain adds one
    (exercised on a compiled workload in ``test_explain_config_defaults.py``)."""
    spec = {"kind": "workload", "target": "/p/steps.py:make_step", "device": "cpu"}
    finding = Finding(
        "bench",
        "workload/x",
        "timing",
        "+50 %",
        facts={"kind": "workload", "spec": spec, "threads": 2},
    )
    kwargs = {"spec": spec, "threads": 2, "count": 5}
    assert remeasure_of(finding) == {"call": EXPLAIN_STEADY, "kwargs": kwargs}
    # so the CPU capability is tried by the counterfactual, no untested confound
    assert candidates({"cpu_capability": ("AVX512", "DEFAULT")}, remeasurable=True) == []


def test_a_candidate_slower_by_one_setting_is_explained_by_it_the_same_way_twice(
    make_context, baseline_env, tmp_path: Path
) -> None:
    """The known cause, explained twice in a row on the same machine: the same leading
    cause both times, each share's interval holding the truth (all of the loss), the two
    intervals overlapping, and the arm judged by the rule on what it measured."""
    first, second = (_explain_known_setting(make_context, baseline_env, tmp_path) for _ in "12")
    for explanation in (first, second):
        print(explanation.extra["settings"], [c.describe() for c in explanation.causes])
        # The CPU capability and the variable it is read from are one cause, one arm.
        named = [cause for cause in explanation.causes if cause.kind == "setting"]
        assert [cause.name for cause in named] == ["cpu_capability"]
        assert explanation.causes[0] is named[0]  # it leads
        cause = named[0]
        assert cause.share is not None and cause.share_low is not None
        assert cause.share_high is not None
        # The truth: setting it back recovers all of the loss. A 95 % interval misses the
        # truth one time in twenty by design (three intervals per explanation: seen once
        # under load, the unexplained one ending at -0.017), so each must reach within MISS
        # of the truth; a setting that recovered half of the loss still fails by far.
        assert cause.share_low - MISS <= 1.0 <= cause.share_high + MISS, cause
        low, high = cause.detail["with_arm"][1:]
        assert low * (1 - MISS) <= 1.0 <= high * (1 + MISS), cause  # the change is gone
        # the arm's effect follows the rule (pinned above) on what these rounds measured
        material, holds_0 = cause.share_low > MATERIAL, low <= 1.0 <= high
        expected = (UNDOES if holds_0 else REDUCES) if material else NO_EFFECT
        assert cause.detail["effect"] == expected, cause
        assert "recovers" in cause.evidence and cause.reproduce
        unexplained = (explanation.unexplained_low, explanation.unexplained_high)
        assert unexplained[0] is not None and unexplained[1] is not None
        assert unexplained[0] - MISS <= 0.0 <= unexplained[1] + MISS
        # "explained" needs the unexplained interval to hold 0 and be tight; what five rounds
        # give depends on the machine's noise, so the verdict is checked against that rule.
        holds = unexplained[0] <= 0.0 <= unexplained[1] or unexplained[1] < 0.0
        tight = holds and unexplained[1] - unexplained[0] <= EXPLAINED_WIDTH
        assert explanation.verdict is (ExplainStatus.EXPLAINED if tight else ExplainStatus.PARTLY)
    a, b = first.causes[0], second.causes[0]
    assert a.share_low <= b.share_high and b.share_low <= a.share_high  # type: ignore[operator]


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
    finding = _finding(tmp_path)
    # A harmless setting differs too, so something is measured and found not to help.
    env = {"PYTHONPATH": str(busy), "TORCH_SHOW_CPP_STACKTRACES": "1"}
    part = counterfactual(job, finding, env_of={"candidate": env})
    explanation = combine(finding, [part], [], 0.0)
    found = [c for c in explanation.causes if c.name == "env:TORCH_SHOW_CPP_STACKTRACES"]
    assert found, (explanation.not_checked, explanation.extra)  # the slowdown was reproduced
    decoy = found[0]
    print("decoy", decoy.describe(), explanation.extra["settings"])
    assert decoy.share_low is not None and decoy.share_low < MATERIAL
    assert decoy.detail["effect"] == NO_EFFECT and "does not undo the change" in decoy.evidence
    assert explanation.unexplained_high is not None and explanation.unexplained_high >= 0.75
    assert explanation.verdict is ExplainStatus.UNEXPLAINED
