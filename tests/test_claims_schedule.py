"""The two environments' probes run side by side; results come back on the caller's thread."""

from __future__ import annotations

import threading

import pytest

from torchcanary.claims.section import role_of, side_by_side, split_lanes
from torchcanary.probe_result import Outcome, ProbeResult, Verdict


def _result(role: str, probe_id: str) -> ProbeResult:
    return ProbeResult("run", role, probe_id, Outcome(Verdict.CONFIRMED, "", {}), 0.0, 0.0)


def test_one_lane_runs_while_the_other_is_busy():
    # The baseline's probe finishes only once the candidate's has started: run one after
    # the other, it would wait out its timeout and say so.
    candidate_started = threading.Event()
    waited: list[bool] = []

    def run_one(role: str, probe_id: str) -> ProbeResult:
        if role == "candidate":
            candidate_started.set()
        else:
            waited.append(candidate_started.wait(timeout=10))
        return _result(role, probe_id)

    lanes = {"baseline": ["a"], "candidate": ["a"]}
    results = list(side_by_side(lanes, run_one, on_start=lambda role, pid: None))
    assert waited == [True]
    assert sorted((r.env_role, r.probe_id) for r in results) == [
        ("baseline", "a"),
        ("candidate", "a"),
    ]


def test_each_lane_keeps_its_order_and_starts_are_reported_on_the_callers_thread():
    caller = threading.get_ident()
    starts: list[tuple[str, str, bool]] = []
    lanes = {"baseline": ["s1", "s2", "s3"], "candidate": ["s1", "s2"]}

    def on_start(role: str, probe_id: str) -> None:
        starts.append((role, probe_id, threading.get_ident() == caller))

    results = list(side_by_side(lanes, lambda role, pid: _result(role, pid), on_start))
    for role, ids in lanes.items():
        assert [r.probe_id for r in results if r.env_role == role] == ids
        assert [pid for r, pid, _ in starts if r == role] == ids
    assert all(on_caller for _, _, on_caller in starts)


def test_a_lane_that_fails_outside_a_probe_ends_the_run_without_hanging():
    def run_one(role: str, probe_id: str) -> ProbeResult:
        if role == "baseline":
            raise OSError("worker could not start")
        return _result(role, probe_id)

    lanes = {"baseline": ["a"], "candidate": ["a", "b"]}
    with pytest.raises(OSError, match="could not start"):
        list(side_by_side(lanes, run_one, on_start=lambda role, pid: None))


def test_a_lone_environment_gets_every_cpu_and_each_lane_keeps_the_catalog_order():
    # A new candidate against a baseline whose verdicts were all kept: without a second
    # lane one of the two CPUs would idle through the candidate's probes.
    lanes = split_lanes({"baseline": [], "candidate": ["p1", "p2", "p3", "p4", "p5"]}, cpus=2)
    assert lanes == {"candidate": ["p1", "p3", "p5"], "candidate#2": ["p2", "p4"]}
    assert {role_of(lane) for lane in lanes} == {"candidate"}


def test_two_environments_on_two_cpus_keep_one_lane_each():
    lanes = split_lanes({"baseline": ["a", "b"], "candidate": ["a", "b"]}, cpus=2)
    assert lanes == {"baseline": ["a", "b"], "candidate": ["a", "b"]}


def test_lanes_are_capped_and_never_outnumber_the_probes():
    assert split_lanes({"baseline": [], "candidate": ["only"]}, cpus=16) == {"candidate": ["only"]}
    many = split_lanes({"baseline": [], "candidate": [f"p{i}" for i in range(9)]}, cpus=64)
    assert len(many) == 4
