"""A team's own workloads in the bench: the fixture project's transformer block, timed by the
same interleaved harness in the real 2.13.0 and 2.14.1 environments, and the ways a user's
step can go wrong, each reported in one line while the rest of the run goes on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_helpers import run_canary_here
from torchcanary.bench import report, section
from torchcanary.bench.settings import parse_settings
from torchcanary.bench.suite import expand
from torchcanary.errors import ConfigError
from torchcanary.report.view import load_run_view

FIXTURES = Path(__file__).parent / "fixtures"
STEPS = "workload_demo.steps"


def _project(tmp_path: Path) -> Path:
    """A copy, so the editable install never writes into the repository."""
    target = tmp_path / "workload_project"
    shutil.copytree(FIXTURES / "workload_project", target)
    return target


def test_workload_tables_become_step_and_cold_compile_benchmarks(tmp_path: Path) -> None:
    project = _project(tmp_path)
    settings = parse_settings(
        {
            "families": [],
            "cwd": str(project),
            "workloads": [f"{STEPS}:infer_step"],
            "benchmarks": [
                {
                    "kind": "workload",
                    "target": "src/workload_demo/steps.py:train_step",
                    "params": {"layers": 3},
                    "mode": "compile",
                    "compile": {"backend": "aot_eager"},
                    "overrides": {"candidate": {"params": {"batch": 8}}},
                }
            ],
        }
    )
    specs = {spec["id"]: spec for spec in expand(settings, "cpu")}
    assert set(specs) == {
        "workload/infer_step/eager/cpu",
        "workload/train_step[layers=3]/compile-aot_eager/step/cpu",
        "workload/train_step[layers=3]/compile-aot_eager/cold/cpu",
    }
    train = specs["workload/train_step[layers=3]/compile-aot_eager/step/cpu"]
    assert train["target"] == f"{project}/src/workload_demo/steps.py:train_step"
    assert train["overrides"]["B"] == {"params": {"layers": 3, "batch": 8}}
    cold = specs["workload/train_step[layers=3]/compile-aot_eager/cold/cpu"]
    assert cold["kind"] == "workload_cold" and cold["step"] == train["id"]
    # The plan stores the settings as JSON and a resumed run parses them again.
    assert parse_settings(settings.to_json()) == settings


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"target": "no_colon"}, "target"),
        ({"target": "missing.py:step"}, "no file"),
        ({"target": "pkg:step", "mode": "jit"}, "mode"),
        ({"target": "pkg:step", "compile": {"backend": "inductor"}}, 'mode = "eager"'),
        ({"target": "pkg:step", "mode": "compile", "compile": {"backend": "tvm"}}, "backend"),
        ({"target": "pkg:step", "overrides": {"candidate": {"mode": "compile"}}}, "params"),
        ({"target": "pkg:step", "step": "train"}, "unknown key"),
    ],
)
def test_bad_workload_tables_are_refused_with_the_key_and_fix(
    tmp_path: Path, table: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_settings({"cwd": str(tmp_path), "benchmarks": [{"kind": "workload", **table}]})


def test_workload_flag_with_a_bad_target_exits_2_naming_it(tmp_path: Path) -> None:
    done = run_canary_here("bench", "--workload", "not a target", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "workload target" in done.stderr and "module:function" in done.stderr


@pytest.mark.torch_envs
def test_fixture_workloads_are_timed_in_both_versions_and_bad_ones_say_why(
    tmp_path: Path, make_context
) -> None:
    project = _project(tmp_path)
    infer = {"kind": "workload", "target": f"{STEPS}:infer_step", "rtol": 1e-3, "atol": 1e-4}
    settings = section.parse_settings(
        {
            "families": [],
            "cwd": str(project),
            "with": ["-e ."],
            # Short for CI: no A/A control, 4 groups, and a 5 % false discovery rate so
            # that 3 degrees of freedom can call a 20 % change on a busy 2-core machine.
            "aa_control": False,
            "groups": 4,
            "rounds": 20,
            "group_budget_s": 1.0,
            "warmup_max_s": 0.3,
            "fdr": 0.05,
            "benchmarks": [
                {
                    **infer,
                    "label": "infer-heavier",
                    "params": {"layers": 5},
                    "overrides": {"candidate": {"params": {"layers": 6}}},
                },
                {
                    "kind": "workload",
                    "target": f"{STEPS}:train_step",
                    "params": {"layers": 1},
                    "rtol": 1e-3,
                    "atol": 1e-4,
                },
                {
                    **infer,
                    "params": {"layers": 1},
                    "mode": "compile",
                    "compile": {"backend": "eager"},
                },
                {"kind": "workload", "target": f"{STEPS}:raises"},
                {"kind": "workload", "target": f"{STEPS}:hangs", "timeout_s": 2},
                {"kind": "workload", "target": f"{STEPS}:no_callable"},
                {"kind": "workload", "target": f"{STEPS}:out_of_memory"},
                {"kind": "workload", "target": f"{STEPS}:changing"},
                {"kind": "workload", "target": "workload_demo.missing:step"},
            ],
        }
    )
    ctx = make_context(sections=("bench",), settings={"bench": settings})
    section.run(ctx)
    view = load_run_view(ctx.store, ctx.run_id)
    results = {result.key: result for result in view.sections["bench"]}

    heavier = results["workload/infer-heavier/eager/cpu"]
    assert heavier.verdict == "slower", heavier.payload["reasons"]
    assert 1.05 < heavier.payload["ratio"] < 1.6
    # Six layers do not compute what five do: the outputs differ beyond the tolerance.
    assert heavier.payload["numerics"]["drift"], heavier.payload["numerics"]
    assert any(
        "infer-heavier" in reason and "outputs differ" in reason
        for reason in section.blocking_reasons(view, {})
    )
    summary = report.markdown(view).splitlines()
    row = next(line for line in summary if line.startswith("- `workload/infer-heavier/"))
    assert row.split(" ")[1].endswith("!"), row  # the mark for outputs that differ

    train = results["workload/train_step[layers=1]/eager/cpu"].payload
    assert (
        train["sides"]["baseline"]["median_s"] > 0 and train["sides"]["candidate"]["median_s"] > 0
    )
    assert (
        "aten::mm" in train["dispatch"]["baseline"]["ops"]
        or "aten::addmm" in (train["dispatch"]["baseline"]["ops"])
    )
    assert "aten::_foreach_add_" in train["dispatch"]["candidate"]["ops"] or any(
        "adam" in op.lower() for op in train["dispatch"]["candidate"]["ops"]
    )
    assert "dispatch_diff" in train
    assert train["numerics"]["compared"] == 2 and not train["numerics"]["drift"], train["numerics"]
    for role in ("baseline", "candidate"):
        facts = train["workload"][role]
        assert facts["peak_memory_bytes"] > 0 and "VmHWM" in facts["peak_memory_how"]
        assert facts["output"] == "tensor[]:float32"

    compiled = "workload/infer_step[layers=1]/compile-eager"
    step, cold = results[f"{compiled}/step/cpu"].payload, results[f"{compiled}/cold/cpu"].payload
    assert step["workload"]["candidate"]["graphs"] == [1]
    assert step["workload"]["candidate"]["graph_breaks"] == [0]
    assert step["workload"]["candidate"]["recompiles"] == [0]
    assert cold["clock"] == "wall" and cold["sides"]["candidate"]["median_s"] > 0
    assert (
        len(ctx.store.measurements(ctx.run_id, f"{compiled}/cold/cpu")[("baseline", "samples_s")])
        == 4
    )

    reasons = {
        key.split("/")[1]: result.payload["reason"]
        for key, result in results.items()
        if result.verdict == "not-run"  # the user's code broke: not an honest skip
    }
    assert set(reasons) == {"raises", "hangs", "no_callable", "out_of_memory", "changing", "step"}
    assert "raises raised ValueError: the checkpoint path is not set in setup" in reasons["raises"]
    assert reasons["hangs"].startswith("timeout: no answer within 2 s (the workload hung")
    assert "returned int, not a callable" in reasons["no_callable"]
    assert "ran out of memory on cpu in setup" in reasons["out_of_memory"]
    assert "returns tensor[5, 8]:float32 on its first call but tensor[6, 8]" in reasons["changing"]
    assert "cannot import workload_demo.missing" in reasons["step"]
    for reason in reasons.values():
        assert "\n" not in reason
    # The cached environments were left alone: the project went into per-run overlays.
    assert not _installed_in(ctx.environments["candidate"].python)


def _installed_in(python: str) -> bool:
    import subprocess

    probe = subprocess.run(
        [python, "-c", "import workload_demo"], capture_output=True, text=True, timeout=60
    )
    return probe.returncode == 0


@pytest.mark.torch_envs
def test_a_project_that_does_not_install_skips_its_workloads_with_pips_reason(
    tmp_path: Path, make_context
) -> None:
    settings = section.parse_settings(
        {
            "families": [],
            "cwd": str(tmp_path),
            "with": ["-e ./not-a-project"],
            "groups": 1,
            "aa_control": False,
            "benchmarks": [{"kind": "workload", "target": f"{STEPS}:infer_step"}],
        }
    )
    ctx = make_context(sections=("bench",), settings={"bench": settings})
    section.run(ctx)
    (result,) = ctx.store.section_results(ctx.run_id, "bench")
    assert result.verdict == "not-run"
    reason = result.payload["reason"]
    assert reason.startswith("install-failed: installing -e ./not-a-project failed: pip install")
    assert "not-a-project" in reason.split("failed: pip install", 1)[1], reason
