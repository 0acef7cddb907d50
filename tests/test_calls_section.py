"""The calls section end to end, through ``torchcanary run`` over the two real torch
environments and a fixture project whose suite and workload run in both versions while
their calls change (see its ``solver.py`` and ``steps.py``): one run records the suite and
the workload, replays both, and links the changes to the release notes (``NOTES.md``,
constructed) through the diff section of the same run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary
from test_report_browser import CHROMIUM, CHROMIUM_FLAGS
from torchcanary.envs.cache import Environment, cache_root

pytestmark = pytest.mark.torch_envs
SHARED_CACHE = cache_root()  # where the torch environments are (conftest.py's)

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


@pytest.fixture(scope="module")
def calls_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture project after one ``run --only diff,calls`` of its suite and workload
    (its own result cache, the shared environments), shared by this module's tests."""
    project = tmp_path_factory.mktemp("calls") / "calls_project"
    shutil.copytree(FIXTURES / "calls_project", project)
    (project / "canary.toml").write_text(CONFIG)
    cache = tmp_path_factory.mktemp("calls-cache")
    (cache / "envs").symlink_to(SHARED_CACHE / "envs", target_is_directory=True)
    result = run_canary(
        "run",
        "--only",
        "diff,calls",
        "--workload",
        "steps.py:make_step",
        "--quiet",
        cwd=project,
        TORCHCANARY_CACHE=str(cache),
    )
    out = project / "canary-results" / "latest"
    assert (out / "summary.md").is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    return project


def test_calls_of_a_suite_and_a_workload_are_named_with_their_site_change_and_notes(
    calls_run: Path,
) -> None:
    project = calls_run
    out = project / "canary-results" / "latest"
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


# torchcanary repro on the same stored run -------------------------------------------------
# The held-out-style case: torch.cholesky, removed in 2.14, hidden behind a fallback in
# solver.py; and torch.cat, whose message changed only under a variable the run gave the
# candidate's replay alone, so a standalone script shows no change.
REMOVED = "solver.py:17 torch.cholesky#"
MESSAGE_ONLY = "solver.py:24 torch.cat#"


def _folder(out: Path, finding: str) -> Path:
    """The reproducer folder of ``finding`` (its name starts with the finding's words)."""
    site, name = finding.rstrip("#").replace(":", "-").split(" ")
    (folder,) = (out / "repro").glob(f"calls-{site}-{name}-*")
    return folder


@pytest.fixture(scope="module")
def reproduced(calls_run: Path) -> subprocess.CompletedProcess[str]:
    """``torchcanary repro latest`` for the removed call and the message-only change."""
    return run_canary("repro", "latest", REMOVED, MESSAGE_ONLY, cwd=calls_run)


def test_repro_of_a_removed_call_behind_a_fallback_raises_in_the_candidate_only(
    calls_run: Path,
    reproduced: subprocess.CompletedProcess[str],
    baseline_env: Environment,
    candidate_env: Environment,
) -> None:
    out = calls_run / "canary-results" / "latest"
    # one of the two does not reproduce: exit 1, each named with its verdict
    assert reproduced.returncode == 1, reproduced.stdout + reproduced.stderr
    assert f"reproduces: calls:{REMOVED}" in reproduced.stdout
    assert f"does not reproduce: calls:{MESSAGE_ONLY}" in reproduced.stdout
    removed = _folder(out, REMOVED)
    script = (removed / "repro.py").read_text()
    assert len(script.strip().splitlines()) <= 15, script
    assert "torch.cholesky(x0)" in script and "torchcanary" not in script
    # run again here, as a user would, in each version's environment
    printed = {}
    for role, environment in (("baseline", baseline_env), ("candidate", candidate_env)):
        ran = subprocess.run(
            [environment.python, "repro.py"], cwd=removed, capture_output=True, text=True
        )
        assert ran.returncode == 0, ran.stderr
        printed[role] = ran.stdout
    assert printed["baseline"].startswith("returns tensor([[2.0000, 0.0000],")
    assert printed["candidate"].startswith(
        "raises RuntimeError: This function was deprecated since version 1.9 and is now removed"
    )
    verification = json.loads((removed / "verification.json").read_text())
    assert verification["verdict"] == "reproduces"
    assert verification["outputs"] == printed
    pins = (removed / "requirements-candidate.txt").read_text().splitlines()
    assert f"torch=={candidate_env.torch_version}" in pins
    assert f"torch=={baseline_env.torch_version}" in (
        (removed / "requirements-baseline.txt").read_text().splitlines()
    )
    expected = (removed / "expected.txt").read_text()
    assert expected.startswith("baseline: returns\ncandidate: raises RuntimeError: This function")
    digest = json.loads((out / "results.json").read_text())["evidence"]["digest"]
    issue = (removed / "ISSUE.md").read_text()
    assert issue.startswith("# torch.cholesky returns in the baseline, raises RuntimeError")
    assert digest in issue and "**reproduces**" in issue
    assert "torch_build_variant: cpu vs cu130" in issue  # the confound the run named
    # the message-only change: labelled, with both outputs, and not linked
    message_only = json.loads((_folder(out, MESSAGE_ONLY) / "verification.json").read_text())
    assert message_only["verdict"] == "does not reproduce"
    assert message_only["reason"] == "both versions printed the same"
    assert message_only["outputs"]["baseline"].startswith("raises RuntimeError: Sizes of tensors")
    summary = (out / "summary.md").read_text()
    assert f"([Reproduce](repro/{removed.name}/repro.py))" in summary
    assert summary.count("[Reproduce]") == 1


@pytest.mark.browser
def test_the_reproduce_link_opens_the_script_in_the_browser(
    calls_run: Path, reproduced: subprocess.CompletedProcess[str]
) -> None:
    from playwright.sync_api import sync_playwright

    report = calls_run / "canary-results" / "latest" / "report.html"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page()
        page.goto(report.resolve().as_uri())
        links = page.locator("#calls a.reproduce")
        count = links.count()
        beside = links.first.locator("xpath=..").inner_text()
        links.first.click()
        page.wait_for_load_state("load")
        opened, text = page.url, page.inner_text("body")
        browser.close()
    assert count == 1
    assert beside.startswith("solver.py:17 torch.cholesky(")
    assert opened.endswith("/repro.py") and "result = torch.cholesky(x0)" in text


def test_repro_reduce_shrinks_the_matrix_while_the_candidate_still_raises(
    calls_run: Path, tmp_path: Path
) -> None:
    result = run_canary(
        "repro", "latest", REMOVED, "--reduce", "--output", str(tmp_path), cwd=calls_run
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "x0 (argument 0) [2, 2] -> [1, 1]" in result.stdout
    assert "(1 tries" in result.stdout and "nothing left to halve" in result.stdout
    (folder,) = (tmp_path / "latest" / "repro").glob("calls-solver.py-17-torch.cholesky-*")
    script = (folder / "repro.py").read_text()
    assert "x0 = torch.tensor([[4.0]], dtype=torch.float32)" in script
    assert json.loads((folder / "verification.json").read_text())["verdict"] == "reproduces"
