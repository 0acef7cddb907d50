"""The calls section end to end over the two real torch environments and a fixture project
whose suite passes in both versions while its calls change (see its ``solver.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from torchcanary.calls import report, section
from torchcanary.calls.section import blocking_reasons
from torchcanary.report.view import load_run_view

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.torch_envs


def test_calls_hidden_by_fallbacks_are_named_with_their_site_and_change(
    tmp_path, make_context
) -> None:
    project = tmp_path / "calls_project"
    shutil.copytree(FIXTURES / "calls_project", project)
    settings = section.parse_settings(
        {
            "cwd": str(project),
            "command": "pytest -q",
            # constructed: only the candidate's replay shows C++ stack traces in messages
            "candidate_env": {"TORCH_SHOW_CPP_STACKTRACES": "1"},
        }
    )
    ctx = make_context(sections=("calls",), settings={"calls": settings})
    section.run(ctx)
    view = load_run_view(ctx.store, ctx.run_id)
    text = report.markdown(view)
    # real: torch.cholesky is gone in 2.14, hidden by the fallback
    assert "solver.py:17 torch.cholesky(float32[2,2]" in text
    assert "returns in the baseline, raises RuntimeError: This function was deprecated" in text
    assert "solver.py:17 torch.ops.aten.cholesky.default(" in text
    assert "returns in the baseline, the callable does not exist in the candidate" in text
    # constructed: the exception's message changed in the candidate
    assert "solver.py:24 torch.cat(" in text
    assert "in both; the message now adds: Exception raised from" in text
    assert "Not replayable" in text and "Generator" in text
    summary = report.json_parts(view)["calls"]["summary"]
    assert summary["recorded"] > summary["replayed"] > 0
    assert "distinct call(s) recorded under the baseline" in text
    assert "your command while recorded: passed" in text
    reasons = blocking_reasons(view, {})
    assert reasons and "torch.cholesky" in reasons[0]
    cases = {c.name: c.status for c in report.junit_cases(view)}
    assert cases[next(n for n in cases if "torch.cholesky" in n)] == "failure"
    assert '<section id="calls">' in report.html(view)
