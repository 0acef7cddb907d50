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

    probes = {"baseline": ["a"], "candidate": ["a"]}
    lanes = {"baseline": ["baseline"], "candidate": ["candidate"]}
    results = list(side_by_side(probes, lanes, run_one, on_start=lambda role, pid: None))
    assert waited == [True]
    assert sorted((r.env_role, r.probe_id) for r in results) == [
        ("baseline", "a"),
        ("candidate", "a"),
    ]


def test_an_environments_probes_start_in_order_and_are_reported_on_the_callers_thread():
    caller = threading.get_ident()
    starts: list[tuple[str, str, bool]] = []
    probes = {"baseline": ["s1", "s2", "s3"], "candidate": ["s1", "s2"]}
    lanes = {"baseline": ["baseline", "baseline#2"], "candidate": ["candidate"]}

    def on_start(lane: str, probe_id: str) -> None:
        starts.append((role_of(lane), probe_id, threading.get_ident() == caller))

    results = list(
        side_by_side(probes, lanes, lambda lane, pid: _result(role_of(lane), pid), on_start)
    )
    for role, ids in probes.items():
        assert sorted(r.probe_id for r in results if r.env_role == role) == ids
        assert [pid for r, pid, _ in starts if r == role] == ids
    assert all(on_caller for _, _, on_caller in starts)


def test_a_free_lane_takes_the_next_probe_instead_of_idling_behind_a_long_one():
    # p1 compiles for long; dealt out in advance, p3 would wait behind it in its lane
    # while the other lane sat idle, and p1 would wait out its timeout here.
    others_done = threading.Event()
    finished: list[str] = []

    def run_one(lane: str, probe_id: str) -> ProbeResult:
        if probe_id == "p1":
            assert others_done.wait(timeout=10), "p1's lane was left the later probes"
        else:
            finished.append(probe_id)
            if len(finished) == 3:
                others_done.set()
        return _result(role_of(lane), probe_id)

    probes = {"baseline": [], "candidate": ["p1", "p2", "p3", "p4"]}
    lanes = split_lanes(probes, cpus=2)
    results = list(side_by_side(probes, lanes, run_one, on_start=lambda lane, pid: None))
    assert finished == ["p2", "p3", "p4"]
    assert sorted(r.probe_id for r in results) == ["p1", "p2", "p3", "p4"]


def test_a_lane_that_fails_outside_a_probe_ends_the_run_without_hanging():
    def run_one(role: str, probe_id: str) -> ProbeResult:
        if role == "baseline":
            raise OSError("worker could not start")
        return _result(role, probe_id)

    probes = {"baseline": ["a"], "candidate": ["a", "b"]}
    lanes = {"baseline": ["baseline"], "candidate": ["candidate"]}
    with pytest.raises(OSError, match="could not start"):
        list(side_by_side(probes, lanes, run_one, on_start=lambda role, pid: None))


def test_a_lone_environment_gets_every_cpu():
    # A new candidate against a baseline whose verdicts were all kept: without a second
    # lane one of the two CPUs would idle through the candidate's probes.
    lanes = split_lanes({"baseline": [], "candidate": ["p1", "p2", "p3", "p4", "p5"]}, cpus=2)
    assert lanes == {"candidate": ["candidate", "candidate#2"]}
    assert {role_of(lane) for lane in lanes["candidate"]} == {"candidate"}


def test_two_environments_on_two_cpus_keep_one_lane_each():
    lanes = split_lanes({"baseline": ["a", "b"], "candidate": ["a", "b"]}, cpus=2)
    assert lanes == {"baseline": ["baseline"], "candidate": ["candidate"]}


def test_lanes_are_capped_and_never_outnumber_the_probes():
    assert split_lanes({"baseline": [], "candidate": ["only"]}, cpus=16) == {
        "candidate": ["candidate"]
    }
    many = split_lanes({"baseline": [], "candidate": [f"p{i}" for i in range(9)]}, cpus=64)
    assert len(many["candidate"]) == 4
