"""The stack section end to end over the two real torch environments and fixture projects.

The fixture project's tests are written so that torch itself decides their outcome: the
removed ``torch.cholesky``, the new ``torch._higher_order_ops.switch``, the removed store
collectives, ``torch.jit.script``'s changed warning category, and ``torch.quantile`` whose
float32 result moved by one ULP.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from cli_helpers import run_canary_here
from torchcanary.accounting import unchecked_units
from torchcanary.report.view import load_run_view
from torchcanary.sections import get_section
from torchcanary.stack import report, section
from torchcanary.stack.section import blocking_reasons
from torchcanary.store.rows import SUMMARY_KEY

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.torch_envs


def _project(tmp_path: Path, name: str = "stack_project") -> Path:
    """A copy, so installs and runs never write into the repository."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def _context(make_context, project: Path, **settings):
    parsed = section.parse_settings({"cwd": str(project), **settings})
    return make_context(sections=("stack",), settings={"stack": parsed})


def _rows(ctx) -> dict[tuple[str, str], object]:
    return {(r.key, r.env_role): r for r in ctx.store.section_results(ctx.run_id, "stack")}


def test_fixture_suite_diff_names_each_change_and_its_determinism(
    tmp_path, make_context, baseline_env, candidate_env
):
    project = _project(tmp_path)
    ctx = _context(
        make_context,
        project,
        command="pytest -q",
        reruns=1,
        numerics_max_ulps=0,
        env={"STACKDEMO_STATE": str(tmp_path / "state")},
        **{"with": ["-e ."]},
    )
    section.run(ctx)
    rows = _rows(ctx)
    test = "tests/test_ops.py::"
    verdicts = {key: row.verdict for (key, role), row in rows.items() if role == "both"}
    assert verdicts == {
        test + "test_cholesky_factor_reconstructs_the_matrix": "newly-failing",
        test + "test_flaky_on_first_run_where_switch_exists": "newly-failing",
        test + "test_switch_runs_the_indexed_branch": "newly-passing",
        test + "test_store_collectives_gather_one_rank": "newly-skipped",
        test + "test_scripted_function_doubles": "new-warning",
        "numerics:quantiles": "numeric-drift",
        SUMMARY_KEY: "changes",
    }
    cholesky = rows[(test + "test_cholesky_factor_reconstructs_the_matrix", "both")].payload
    assert cholesky["deterministic"] is True
    assert cholesky["reruns"] == {"baseline": ["passed"], "candidate": ["failed"]}
    assert any("torch.cholesky" in line for line in cholesky["first_differing_lines"]["candidate"])
    flaky = rows[(test + "test_flaky_on_first_run_where_switch_exists", "both")].payload
    assert flaky["deterministic"] is False
    warning = rows[(test + "test_scripted_function_doubles", "both")].payload
    assert [w["category"] for w in warning["new_warnings"]] == ["FutureWarning"]
    drift = rows[("numerics:quantiles", "both")].payload["numerics"]
    assert drift["max_ulps"] == 1 and drift["beyond_tolerance"] == 0
    summary = rows[(SUMMARY_KEY, "both")].payload
    assert summary["counts"]["unchanged"] == 2
    assert summary["numerics"]["compared"] == 2  # matmul matched bit for bit
    for role, env in (("baseline", baseline_env), ("candidate", candidate_env)):
        side = rows[(SUMMARY_KEY, role)]
        assert side.verdict == "failed" and side.payload["tests"] == 7
        assert side.payload["torch_version"] == env.torch_version
        # The project went into the overlay, never into the shared cached environment.
        assert not list(Path(env.path).glob("lib/python*/site-packages/*stackdemo*"))
        assert not list(Path(env.path).glob("lib/python*/site-packages/_pytest"))
    view = load_run_view(ctx.store, ctx.run_id)
    # the newly failing test, and the coverage the candidate lost (a test that passed in
    # the baseline and is skipped in the candidate: stack_block_on_lost_tests = "passed")
    failing, lost = blocking_reasons(view, {})
    assert "test_cholesky_factor_reconstructs_the_matrix" in failing
    assert lost.startswith(
        "stack: 1 test(s) that passed in the baseline did not run in the candidate"
    )
    assert "test_store_collectives_gather_one_rank" in lost
    assert "newly-failing" in report.html(view)

    started = time.monotonic()
    ctx.resume = True
    section.run(ctx)  # everything is stored: a resumed run does nothing
    assert time.monotonic() - started < 2
    assert len(_rows(ctx)) == len(rows)

    # torchcanary repro: the newly failing test run again alone, in the suite's overlays
    reproduced = run_canary_here(
        "repro",
        ctx.run_id,
        "test_cholesky",
        "--store",
        str(tmp_path / "canary.db"),
        "--output",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert reproduced.returncode == 0, reproduced.stdout + reproduced.stderr
    (folder,) = (tmp_path / "out" / ctx.run_id / "repro").iterdir()
    outputs = json.loads((folder / "verification.json").read_text())["outputs"]
    assert outputs["baseline"].startswith("passed\n")
    assert outputs["candidate"].startswith("failed\n") and "torch.cholesky" in outputs["candidate"]


def test_plain_script_break_is_deterministic_and_resume_reuses_the_baseline(tmp_path, make_context):
    project = _project(tmp_path)
    ctx = _context(
        make_context,
        project,
        command="python scripts/factorize.py",
        reruns=1,
        env={"PYTHONPATH": "src"},
    )
    section.run(ctx)
    change = _rows(ctx)[("command", "both")]
    assert change.verdict == "newly-failing"
    assert change.payload["deterministic"] is True
    assert change.payload["also"] == ["new-warning"]
    assert "FutureWarning" in change.payload["new_warnings"][0]["category"]
    lines = change.payload["first_differing_lines"]
    assert any("factor:" in line for line in lines["baseline"])
    assert any("RuntimeError" in line or "Traceback" in line for line in lines["candidate"])

    # Interrupted after the baseline: its stored run is reused, only the candidate runs again.
    with sqlite3.connect(ctx.store.path) as db:
        db.execute(
            "DELETE FROM section_results WHERE run_id = ? AND env_role != 'baseline'", (ctx.run_id,)
        )
    baseline_main = ctx.work_dir / "stack" / "baseline" / "main"
    shutil.rmtree(baseline_main)
    ctx.resume = True
    section.run(ctx)
    assert not baseline_main.exists()
    assert _rows(ctx)[("command", "both")].verdict == "newly-failing"


def test_project_that_does_not_install_in_the_candidate_keeps_baseline_results(
    tmp_path, make_context
):
    project = _project(tmp_path, "stack_project_pinned")
    ctx = _context(
        make_context, project, command="python -c 'import stackpinned'", **{"with": ["-e ."]}
    )
    section.run(ctx)
    rows = _rows(ctx)
    assert rows[(SUMMARY_KEY, "baseline")].verdict == "passed"
    candidate = rows[(SUMMARY_KEY, "candidate")]
    assert candidate.verdict == "install-failed"
    assert "torch" in candidate.payload["detail"] and "pip install" in candidate.payload["detail"]
    assert rows[(SUMMARY_KEY, "both")].verdict == "not-compared"
    # Not the stack's objection but a command that did not run (the core rule, issue 28).
    view = load_run_view(ctx.store, ctx.run_id)
    assert blocking_reasons(view, {}) == []
    stack = get_section("stack")
    unchecked = unchecked_units(stack, stack.planned_units(ctx.plan), view)
    assert [(u.unit.env_role, u.verdict) for u in unchecked] == [
        ("candidate", "install-failed"),
        ("both", "not-compared"),
    ]
    assert "candidate did not run (install-failed)" in unchecked[1].why


_ALLREDUCE = """\
import os
import sys

import torch
import torch.distributed as dist

import stackdemo  # the user's project: only the overlay's interpreter has it

assert os.path.samefile(sys.prefix, os.environ["VIRTUAL_ENV"]), (sys.prefix, os.environ)
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_starts_the_users_job_under_the_env_under_test(tmp_path, make_context):
    """As in a venv the user built: `torchrun` is the env's, and its workers see the project."""
    project = _project(tmp_path)
    (project / "allreduce.py").write_text(_ALLREDUCE)
    ctx = _context(
        make_context,
        project,
        command="torchrun --standalone --nproc-per-node 2 allreduce.py",
        # Re-runs are another test's subject: here the command's own slower start in the
        # candidate (its torch imports slower) made it a timing suspect run three more times
        # per side, each a torchrun and two ranks (34 of the test's 51 CPU seconds).
        reruns=0,
        **{"with": ["-e ."]},
    )
    section.run(ctx)
    rows = _rows(ctx)
    for role in ("baseline", "candidate"):
        side = rows[(SUMMARY_KEY, role)]
        assert side.verdict == "passed", side.payload.get("detail")
        output = (ctx.work_dir / "stack" / role / "main" / "output.log").read_text()
        assert "rank 0 of 2: sum 3" in output and "rank 1 of 2: sum 3" in output
    assert rows[(SUMMARY_KEY, "both")].verdict == "no-changes"


def test_missing_command_is_reported_for_both_environments(tmp_path, make_context):
    ctx = _context(make_context, tmp_path, command="no-such-tool-xyz --version")
    section.run(ctx)
    rows = _rows(ctx)
    for role in ("baseline", "candidate"):
        assert rows[(SUMMARY_KEY, role)].verdict == "not-found"
        assert "'no-such-tool-xyz' was not found" in rows[(SUMMARY_KEY, role)].payload["detail"]
    assert rows[(SUMMARY_KEY, "both")].verdict == "not-compared"


def test_candidate_hang_times_out_and_leftover_children_are_reaped(tmp_path, make_context):
    project = _project(tmp_path)
    # The candidate waits out the whole timeout twice (its run and its rerun); the baseline
    # only imports torch, well within 15 s even on a busy two-core machine.
    ctx = _context(
        make_context, project, command="python scripts/hang_in_candidate.py", timeout_s=15, reruns=1
    )
    started = time.monotonic()
    section.run(ctx)
    assert time.monotonic() - started < 150
    rows = _rows(ctx)
    baseline, candidate = rows[(SUMMARY_KEY, "baseline")], rows[(SUMMARY_KEY, "candidate")]
    assert baseline.verdict == "passed" and len(baseline.payload["stragglers"]) == 1
    assert candidate.verdict == "timeout" and len(candidate.payload["stragglers"]) == 1
    assert "helper started" in candidate.payload["stdout_tail"]
    change = rows[("command", "both")]
    assert change.verdict == "newly-erroring" and change.payload["deterministic"] is True
    assert change.payload["reruns"]["candidate"] == ["error"]


_BAD_TESTS_IN_CANDIDATE = """
import os
import time

import torch

CANDIDATE = torch.__version__.startswith("2.14")


def test_a_runs_first():
    pass


def test_b_hangs_in_candidate():
    if CANDIDATE:
        time.sleep(600)


def test_c_crashes_in_candidate():
    if CANDIDATE:
        os.abort()


def test_d_runs_after_both():
    pass
"""


def test_hung_and_crashing_tests_are_stopped_and_the_tests_after_them_still_run(
    tmp_path, make_context
):
    project = tmp_path / "suite"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_bad.py").write_text(_BAD_TESTS_IN_CANDIDATE)
    # The tests that pass take milliseconds: 2 s holds them, and bounds each hang's wait.
    ctx = _context(make_context, project, command="pytest -q", test_timeout_s=2, reruns=1)
    started = time.monotonic()
    section.run(ctx)
    assert time.monotonic() - started < 300  # the 600 s sleep was cut short
    rows = _rows(ctx)
    test = "tests/test_bad.py::"
    hung, crashed = (
        rows[(test + "test_b_hangs_in_candidate", "both")],
        rows[(test + "test_c_crashes_in_candidate", "both")],
    )
    assert hung.verdict == crashed.verdict == "newly-erroring"
    assert hung.payload["candidate"]["outcome"] == "timeout"
    assert "2 s test timeout" in hung.payload["candidate"]["message"]
    assert crashed.payload["candidate"]["outcome"] == "crashed"
    assert hung.payload["deterministic"] is True and crashed.payload["deterministic"] is True
    assert hung.payload["reruns"]["candidate"] == ["timeout"]
    candidate = rows[(SUMMARY_KEY, "candidate")]
    assert candidate.verdict == "timeout"
    assert candidate.payload["outcomes"] == {"crashed": 1, "passed": 2, "timeout": 1}
    assert "started 2 more time(s)" in candidate.payload["detail"]
    assert (test + "test_d_runs_after_both", "both") not in rows  # passed in both: unchanged
    assert rows[(SUMMARY_KEY, "baseline")].payload["outcomes"] == {"passed": 4}
