"""A test whose outcome changed is linked to the changes its failure touches (a removed API
it calls, at the file:line the diff found) and to the first frame that differs; the diff's
flipped config defaults become settings the counterfactual sets back. Through the section:
stored stack and diff rows in, stored explanations and a Why block out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary
from torchcanary.diff.changes import ChangeKind
from torchcanary.diff.result import DiffChange
from torchcanary.explain import report
from torchcanary.explain.counterfactual import config_arms
from torchcanary.explain.section import run
from torchcanary.explain.tracebacks import frames
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding
from torchcanary.stack.result import ChangeVerdict, StackChange
from torchcanary.store.rows import SectionResult

_CANDIDATE_TEXT = """Traceback (most recent call last):
  File "/proj/tests/test_app.py", line 5, in test_scale
    scale(x)
  File "/proj/app.py", line 12, in scale
    return torch.legacy.scale(x)
AttributeError: module 'torch.legacy' has no attribute 'scale'
"""
_BASELINE_TEXT = """Traceback (most recent call last):
  File "/proj/tests/test_app.py", line 5, in test_scale
    scale(x)
  File "/proj/tests/test_app.py", line 9, in test_scale
AssertionError
"""


def test_frames_are_read_from_python_and_pytest_failure_texts() -> None:
    assert frames(_CANDIDATE_TEXT) == [("/proj/tests/test_app.py", 5), ("/proj/app.py", 12)]
    assert frames("app/model.py:33: in forward\n") == [("app/model.py", 33)]


def test_a_flipped_config_default_becomes_a_setting_to_set_back() -> None:
    change = Finding(
        "diff",
        "default-changed:torch._inductor.config.fx_graph_cache",
        "change",
        "",
        facts={
            "change": "default-changed",
            "symbol": "torch._inductor.config.fx_graph_cache",
            "baseline": False,
            "candidate": True,
        },
    )
    arms = config_arms([change])
    name = "config:torch._inductor.config.fx_graph_cache"
    assert arms[name].python == {name: False}


def test_a_changed_outcome_is_linked_to_the_removed_api_its_traceback_calls(make_context) -> None:
    ctx = make_context(sections=("stack", "diff", "explain"))
    ctx.store.save_section_result(
        ctx.run_id,
        SectionResult.of(
            "stack",
            StackChange(
                key="tests/test_app.py::test_scale",
                verdict=ChangeVerdict.NEWLY_ERRORING,
                baseline={"outcome": "failed", "message": _BASELINE_TEXT},
                candidate={"outcome": "error", "message": _CANDIDATE_TEXT},
            ),
        ),
    )
    for symbol, hits in (
        ("torch.legacy.scale", [{"path": "app.py", "line": 12, "use": "call"}]),
        ("torch.other.thing", []),
    ):
        ctx.store.save_section_result(
            ctx.run_id,
            SectionResult.of(
                "diff",
                DiffChange(
                    key=f"api-removed:{symbol}",
                    verdict=ChangeKind.API_REMOVED,
                    symbol=symbol,
                    baseline="function",
                    hits=tuple(hits),
                ),
            ),
        )
    run(ctx)
    view = load_run_view(ctx.store, ctx.run_id)
    [explanation] = report.explanations(view)  # the diff's changes are causes, not findings
    assert explanation.item == "tests/test_app.py::test_scale"
    names = {cause.name: cause for cause in explanation.causes}
    assert "torch.legacy.scale" in names and "torch.other.thing" not in names
    assert names["torch.legacy.scale"].kind == "api-removed"
    assert "/proj/app.py:12" in names
    assert "Why stack `tests/test_app.py::test_scale` moved" in report.markdown(view)


def test_a_regressed_drill_is_linked_to_the_removed_api_its_traceback_names(make_context) -> None:
    from torchcanary.drill.result import DrillRun, DrillVerdict

    ctx = make_context(sections=("drill", "diff", "explain"))
    for role, verdict, text in (
        ("baseline", DrillVerdict.PASSED, None),
        ("candidate", DrillVerdict.FAILED, "AttributeError: torch.legacy.scale is gone"),
    ):
        run_row = DrillRun(key="kill:restart", env_role=role, verdict=verdict, traceback=text)
        ctx.store.save_section_result(ctx.run_id, SectionResult.of("drill", run_row))
    change = DiffChange(
        key="api-removed:torch.legacy.scale",
        verdict=ChangeKind.API_REMOVED,
        symbol="torch.legacy.scale",
    )
    ctx.store.save_section_result(ctx.run_id, SectionResult.of("diff", change))
    run(ctx)
    [explanation] = report.explanations(load_run_view(ctx.store, ctx.run_id))
    assert (explanation.section, explanation.item) == ("drill", "kill:restart")
    assert explanation.delta == "passed -> failed"
    assert [c.name for c in explanation.causes if c.kind == "api-removed"] == ["torch.legacy.scale"]


def test_a_regressed_claim_is_a_finding_with_both_sides_evidence_as_its_texts() -> None:
    from torchcanary.claims.findings import findings
    from torchcanary.claims.view import ClaimsView
    from torchcanary.probe_result import Outcome, ProbeResult, Verdict
    from torchcanary.section_types import RunView
    from torchcanary.store.rows import RunRow

    def result(role: str, verdict: Verdict, summary: str) -> ProbeResult:
        return ProbeResult("r", role, "compile.cache", Outcome(verdict, summary), 1.0, 0.0)

    claims = ClaimsView(
        probe_results=[
            result("baseline", Verdict.CONFIRMED, "cache hit"),
            result("candidate", Verdict.REFUTED, "torch.legacy.scale raised"),
        ]
    )
    view = RunView(RunRow("r", 0.0, None, "done", {}, None, None), {}, {}, {"claims": claims})
    [finding] = findings(view)
    assert (finding.item, finding.kind, finding.delta) == (
        "compile.cache",
        "outcome",
        "confirmed -> refuted",
    )
    assert "torch.legacy.scale" in finding.facts["candidate_text"]


# The project's own test: its configure() sets a config key 2.14 removed
# (trainer/compile_setup.py:16), so it fails in the candidate only.
_PROJECT_TEST = """
from trainer.compile_setup import configure


def test_the_compiler_is_configured():
    configure()
"""


@pytest.mark.torch_envs
def test_a_newly_failing_test_is_linked_to_the_change_that_broke_it_through_run_stack(
    tmp_path: Path,
) -> None:
    project = tmp_path / "surface_project"
    shutil.copytree(FIXTURES / "surface_project", project)
    (project / "conftest.py").write_text("")  # the project's root on the tests' path
    (project / "tests").mkdir()
    (project / "tests" / "test_setup.py").write_text(_PROJECT_TEST)
    result = run_canary(
        "run",
        "--only",
        "stack,diff,explain",
        "--stack",
        "pytest -q tests",
        "--reruns",
        "1",
        "--quiet",
        cwd=project,
    )
    out = project / "canary-results" / "latest"
    assert (out / "results.json").is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    report_json = json.loads((out / "results.json").read_text())
    key = "tests/test_setup.py::test_the_compiler_is_configured"
    [explanation] = [e for e in report_json["explanations"] if e["key"] == f"stack:{key}"]
    causes = {c["name"]: c for c in explanation["payload"]["causes"]}
    symbol = "torch._inductor.config.cuda.nvgemm_max_profiling_configs"
    print(json.dumps(explanation["payload"]["causes"], indent=1)[:3000])
    assert causes[symbol]["kind"] == "config-removed"
    assert "trainer/compile_setup.py:16" in causes[symbol]["evidence"]
