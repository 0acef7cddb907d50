"""A drilled job is compared with the fault-free one step by step, under one tolerance.

The events here have the shape the drill job writes (``ev``, ``step``, ``loss``,
``grad_norm``, ``rank``, ``attempt``); what is checked is how the comparison, the drill's
verdict and the go/no-go policy read them.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from torchcanary.drill import drill, section, trajectory
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.drill import DrillRunner
from torchcanary.store.rows import SectionResult

REFERENCE = [[step, 5.0 - 0.1 * step, 2.0 + 0.01 * step] for step in range(8)]


def _events(changes: dict[int, dict[str, Any]] | None = None, **extra: Any) -> list[dict]:
    """Two ranks that reproduce REFERENCE, except the fields ``changes`` sets per step."""
    events = []
    for step, loss, grad_norm in REFERENCE:
        for rank in (0, 1):
            record = {"ev": "step", "step": step, "loss": loss, "grad_norm": grad_norm}
            record.update({"rank": rank, "attempt": 0, **(changes or {}).get(step, {})})
            events.append(record)
    return events


def _rows(events: list[dict]) -> list[dict[str, Any]]:
    return trajectory.step_differences(events, REFERENCE)


def test_identical_steps_have_no_divergence_and_say_so():
    check = trajectory.summary(_rows(_events()), trajectory.LOSS_RTOL)
    assert check["first_differing_step"] is None
    assert check["steps_compared"] == len(REFERENCE)
    assert check["max_loss_rdiff"] == 0.0 and check["max_grad_rdiff"] == 0.0
    assert "all 8 steps match" in trajectory.describe(check)


def test_a_wrong_middle_step_is_found_although_later_steps_wash_it_out():
    # Step 3 is 1 % off; the final step, and so the final loss, are exact.
    rows = _rows(_events({3: {"loss": REFERENCE[3][1] * 1.01}}))
    check = trajectory.summary(rows, trajectory.LOSS_RTOL)
    assert check["first_differing_step"] == 3
    assert check["first_difference"]["loss_rdiff"] == pytest.approx(0.01)
    assert check["max_loss_rdiff"] == pytest.approx(0.01)
    assert "step 3 differs" in trajectory.describe(check)


def test_a_wrong_gradient_norm_alone_is_a_wrong_step():
    rows = _rows(_events({5: {"grad_norm": REFERENCE[5][2] * 2}}))
    first = trajectory.first_divergence(rows, trajectory.LOSS_RTOL)
    assert first is not None and first["step"] == 5
    assert first["loss_rdiff"] == 0.0 and first["grad_rdiff"] == pytest.approx(1.0)


def test_a_redone_step_is_checked_every_time_it_ran():
    events = _events()
    # A restart redid step 4; the first launch's record of it was wrong.
    events.append({"ev": "step", "step": 4, "loss": 9.9, "grad_norm": 2.04, "rank": 0})
    first = trajectory.first_divergence(_rows(events), trajectory.LOSS_RTOL)
    assert first is not None and first["step"] == 4 and first["runs"] == 3


def test_a_step_that_never_ran_and_a_nan_loss_are_differences():
    skipped = [e for e in _events() if e["step"] != 2]
    check = trajectory.summary(_rows(skipped), trajectory.LOSS_RTOL)
    assert check["steps_missing"] == [2] and check["first_differing_step"] == 2
    nan = _rows(_events({1: {"loss": math.nan}}))
    first = trajectory.first_divergence(nan, trajectory.LOSS_RTOL)
    assert first is not None and first["step"] == 1 and first["loss_rdiff"] is None


def _judge(payload: dict[str, Any]) -> tuple[str, str]:
    run = SimpleNamespace(
        injector=SimpleNamespace(fault_t=1.0), bounded_out=False, exit_codes={}, events=[{}]
    )
    return DrillRunner("python", None, None)._judge(  # type: ignore[arg-type]
        DrillSpec("kill", "reconfigure"), run, payload
    )


def _payload(events: list[dict]) -> dict[str, Any]:
    rows = _rows(events)
    return {
        "unsupported": None,
        "detect_s": 1.0,
        "finished_ranks": 2,
        "reference": {"ok": True},
        "params_identical": True,
        "final_loss": 4.0,
        "reference_loss": 4.0,
        "restarts": 0,
        "parallel": "ddp",
        "step_diffs": rows,
        "step_check": trajectory.summary(rows, trajectory.LOSS_RTOL),
    }


def test_a_drill_with_a_wrong_step_fails_although_its_final_loss_matches():
    verdict, reason = _judge(_payload(_events({3: {"loss": REFERENCE[3][1] * 1.01}})))
    assert verdict == "failed"
    assert "step 3 differs" in reason
    verdict, reason = _judge(_payload(_events()))
    assert verdict == "passed" and "under ddp" in reason


def _candidate(events: list[dict]) -> SimpleNamespace:
    payload = _payload(events)
    return SimpleNamespace(
        sections={
            "drill": [SectionResult("drill", "kill:reconfigure", "candidate", "passed", payload)]
        }
    )


def test_policy_blocks_a_wrong_step_even_when_the_final_loss_matches():
    reasons = section.blocking_reasons(_candidate(_events({3: {"loss": 4.73}})), {})
    assert len(reasons) == 1 and "step 3 differs" in reasons[0]
    assert section.blocking_reasons(_candidate(_events()), {}) == []


def test_the_loss_tolerance_is_defined_once_and_the_policy_can_tighten_it():
    assert section.POLICY_DEFAULTS["drill_loss_rtol"] is trajectory.LOSS_RTOL
    assert not hasattr(drill, "LOSS_RTOL")  # the drill reads trajectory's
    # 5e-5 off: within the default 1e-4, beyond a policy's 1e-5.
    near = _candidate(_events({6: {"loss": REFERENCE[6][1] * (1 + 5e-5)}}))
    assert section.blocking_reasons(near, {}) == []
    tightened = section.blocking_reasons(near, {"drill_loss_rtol": 1e-5})
    assert len(tightened) == 1 and "step 6 differs" in tightened[0]
