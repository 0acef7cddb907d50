"""The calls section's settings and flags: workloads given to ``run`` make it run, and are
validated as the bench validates them (no environment needed)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torchcanary.bench import section as bench_section
from torchcanary.calls import plugin
from torchcanary.calls.section import _workloads
from torchcanary.calls.settings import CallsSettings
from torchcanary.config import load_settings
from torchcanary.errors import ConfigError


def test_a_workload_alone_is_enough_to_run_and_its_file_target_is_made_absolute(
    tmp_path: Path,
) -> None:
    (tmp_path / "steps.py").write_text("def make_step():\n    return lambda: None\n")
    settings = CallsSettings.parse({"cwd": str(tmp_path), "workloads": ["steps.py:make_step"]})
    assert plugin.missing_input(settings.to_json()) is None
    assert settings.workloads[0]["target"] == f"{tmp_path / 'steps.py'}:make_step"
    assert CallsSettings.from_json(settings.to_json()) == settings
    assert plugin.missing_input(CallsSettings.parse({"cwd": str(tmp_path)}).to_json())


def test_the_bench_s_workloads_feed_the_calls_through_its_output_not_its_flags() -> None:
    args = argparse.Namespace(command="run", stack=None, bench_workloads=["steps.py:make_step"])
    assert not plugin.named_by(args) and "workloads" not in plugin.flag_settings(args)
    assert plugin.fed_by({"workloads": [{"kind": "workload", "target": "pkg.m:step"}]})
    assert not plugin.fed_by({"workloads": []}) and not plugin.fed_by({})


def test_the_bench_workloads_of_the_run_are_recorded_once_each(tmp_path: Path) -> None:
    target = f"{tmp_path / 'steps.py'}:make_step"
    (tmp_path / "steps.py").write_text("def make_step():\n    return lambda: None\n")
    settings = CallsSettings.parse({"cwd": str(tmp_path), "workloads": [target]})
    bench = {
        "workloads": [target, "pkg.bench:step"],
        "benchmarks": [
            {"kind": "gemm"},
            {"kind": "workload", "target": target, "params": {"n": 2}},
        ],
    }
    offered = bench_section.outputs(bench)["workloads"]
    found = [(s["target"], s.get("params", {})) for s in _workloads(settings, offered)]
    assert found == [(target, {}), (target, {"n": 2}), ("pkg.bench:step", {})]


def test_a_workload_that_is_not_a_target_or_a_table_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"calls\.workloads"):
        CallsSettings.parse({"cwd": str(tmp_path), "workloads": [3]})
    with pytest.raises(ConfigError, match="module:function"):
        CallsSettings.parse({"cwd": str(tmp_path), "workloads": ["not a target"]})


def test_a_config_whose_bench_times_a_workload_runs_the_calls_section_without_its_own_table(
    tmp_path: Path,
) -> None:
    (tmp_path / "canary.toml").write_text('[bench]\nworkloads = ["ours.steps:make_step"]\n')
    settings = load_settings(tmp_path / "canary.toml", {}, tmp_path)
    assert "calls" in settings.plan.sections
    assert "calls" not in settings.left_out
    (tmp_path / "canary.toml").write_text("[bench]\nworkloads = []\n")
    settings = load_settings(tmp_path / "canary.toml", {}, tmp_path)
    assert "calls" not in settings.plan.sections
    assert "no command or workload" in settings.left_out["calls"]


def test_the_users_code_is_the_suites_folder_and_what_with_names_paths_and_names_alike(
    tmp_path: Path,
) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "vendored").mkdir()
    given = ["-e .", "pytest", "mylib[extra]>=1.0", "../vendored", "--no-deps other_lib==2"]
    given.append("git+https://example.org/repo.git")
    settings = CallsSettings.parse({"cwd": str(tmp_path / "project"), "with": given})
    assert settings.user_code() == {
        "paths": [str(tmp_path / "project"), str(tmp_path / "vendored")],
        "names": ["pytest", "mylib", "other_lib"],
    }


def test_quiet_calls_is_a_count_of_zero_or_more_kept_through_the_stored_settings(
    tmp_path: Path,
) -> None:
    settings = CallsSettings.parse({"cwd": str(tmp_path), "quiet_calls": 0})
    assert settings.quiet_calls == 0 and CallsSettings.from_json(settings.to_json()) == settings
    assert CallsSettings.parse({"cwd": str(tmp_path)}).quiet_calls is None  # the recorder's own
    for wrong in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="quiet_calls"):
            CallsSettings.parse({"cwd": str(tmp_path), "quiet_calls": wrong})
