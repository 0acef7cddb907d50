"""The calls section end to end, through ``torchcanary run`` over the two real torch
environments and a fixture project whose suite and workload run in both versions while
their calls change (see its ``solver.py`` and ``steps.py``): one run records the suite and
the workload, replays both, and links the changes to the release notes (``NOTES.md``,
constructed) through the diff section of the same run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary

pytestmark = pytest.mark.torch_envs

CONFIG = """
[calls]
command = "pytest -q"  # here, not --stack, which would run the stack section too
# constructed: only the candidate's replay shows C++ stack traces in messages
candidate_env = { TORCH_SHOW_CPP_STACKTRACES = "1" }
# steps.py's slow setup call (about 5 s) outlasts it: stopped, reported, the rest go on;
# 3 s, not 1: a candidate's exception with C++ stack traces took over 1 s under load
replay_timeout_s = 3

[diff]
notes = ["NOTES.md"]
"""


def test_calls_of_a_suite_and_a_workload_are_named_with_their_site_change_and_notes(
    tmp_path: Path,
) -> None:
    project = tmp_path / "calls_project"
    shutil.copytree(FIXTURES / "calls_project", project)
    (project / "canary.toml").write_text(CONFIG)
    result = run_canary(
        "run",
        "--only",
        "diff,calls",
        "--workload",
        "steps.py:make_step",
        "--quiet",
        cwd=project,
    )
    out = project / "canary-results" / "latest"
    assert (out / "summary.md").is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    text = (out / "summary.md").read_text()
    # the suite, real: torch.cholesky is gone in 2.14, hidden by the fallback
    assert "solver.py:17 torch.cholesky(float32[2,2]" in text
    assert "returns in the baseline, raises RuntimeError: This function was deprecated" in text
    assert "solver.py:17 torch.ops.aten.cholesky.default(" in text
    assert "returns in the baseline, the callable does not exist in the candidate" in text
    # the notes' words where the change was announced (no diff change matches: 2.13's
    # torch.cholesky is a builtin without a signature, so the diff sees no change to it)
    assert "the release notes name it: torch.cholesky (\"'torch.cholesky', deprecated" in text
    # constructed: the exception's message changed in the candidate
    assert "solver.py:24 torch.cat(" in text
    assert "in both; the message now adds: Exception raised from" in text
    assert "Not replayable" in text and "Generator" in text
    # the workload, recorded in a run of its own: its site is in the workload's file
    assert "steps.py:22 torch.cholesky(float32[2,2]" in text
    # a replay that outlasts --replay-timeout is stopped and named; the others still judged
    assert "steps.py:15 torch.special.laguerre_polynomial_l(" in text
    assert "timeout when replayed in the baseline" in text
    report = json.loads((out / "results.json").read_text())
    summary = report["calls"]["summary"]
    assert summary["recorded"] > summary["replayed"] > 0
    assert summary["counts"]["raises-now"] >= 3  # suite and workload, api and aten
    assert "pytest -q: passed" in summary["recording_run"]
    assert "workload steps.py:make_step: passed" in summary["recording_run"]
    changes = {(c["site"], c["callable"]): c for c in report["calls"]["changes"]}
    assert changes[("steps.py:22", "torch.cholesky")]["verdict"] == "raises-now"
    assert changes[("steps.py:22", "torch.cholesky")]["announced"] == {
        "notes": "torch.cholesky",
        "notes_say": "`torch.cholesky`, deprecated since 1.9, is removed; use "
        "`torch.linalg.cholesky`.",
    }
    assert report["decision"] == "no-go" and any(
        r.startswith("calls:") and "torch.cholesky" in r
        for r in report["decision_detail"]["reasons"]
    )
    # the project's own operator (torch.library), replayed where the project is installed
    # and imported: the same in both, not missing
    recording = next(project.glob("canary-results/work/*/calls/recording"))
    recorded = [json.loads(line) for line in (recording / "calls.jsonl").read_text().splitlines()]
    (twice,) = [c for c in recorded if c["callable"] == "torch.ops.calls_project.twice.default"]
    replayed = (recording / "replay-candidate.jsonl").read_text().splitlines()
    (candidate,) = [r for r in map(json.loads, replayed) if r["id"] == twice["id"]]
    assert candidate["status"] == "returned"
    assert not [c for c in report["calls"]["changes"] if "calls_project" in c["callable"]]
    junit = (out / "junit.xml").read_text()
    assert 'name="steps.py:22 torch.cholesky"' in junit
    assert '<section id="calls">' in (out / "report.html").read_text()
