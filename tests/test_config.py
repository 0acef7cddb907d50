"""Configuration: files are found, flags win, and the plan records what will run."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_canary_here
from torchcanary.cli import build_parser
from torchcanary.commands.run import flags_from_args
from torchcanary.config import load_settings
from torchcanary.errors import ConfigError


def test_pyproject_table_is_read_and_flags_win(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchcanary]\nbaseline = "torch==2.13.0"\n'
        'sections = ["claims"]\nstore = "results/db.sqlite"\n'
        '[tool.torchcanary.claims]\nprobes = ["c10d.*"]\n'
    )
    settings = load_settings(None, {"candidate": "torch==2.14.1 numpy"}, tmp_path)
    assert settings.plan.baseline == "torch==2.13.0"
    assert settings.plan.candidate == "torch==2.14.1 numpy"
    assert settings.plan.section_settings("claims")["probes"] == ["c10d.*"]
    assert settings.store == tmp_path / "results" / "db.sqlite"
    assert settings.source.endswith("pyproject.toml")


def test_canary_toml_takes_precedence_over_pyproject(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.torchcanary]\nbaseline = "torch==1.0"\n')
    (tmp_path / "canary.toml").write_text('baseline = "torch==2.13.0"\nsections = ["claims"]\n')
    settings = load_settings(None, {}, tmp_path)
    assert settings.plan.baseline == "torch==2.13.0"


def test_policy_file_overrides_defaults_and_rejects_bad_types(tmp_path: Path):
    (tmp_path / "policy.toml").write_text('fail_on_claims = ["regressed", "not reproduced"]\n')
    settings = load_settings(None, {"policy_file": "policy.toml", "sections": ["claims"]}, tmp_path)
    assert settings.plan.policy["fail_on_claims"] == ["regressed", "not reproduced"]
    (tmp_path / "policy.toml").write_text('fail_on_claims = "regressed"\n')
    with pytest.raises(ConfigError, match="must be a list"):
        load_settings(None, {"policy_file": "policy.toml", "sections": ["claims"]}, tmp_path)


def test_help_teaches_the_commands_and_exit_codes(tmp_path: Path):
    result = run_canary_here("--help", cwd=tmp_path)
    assert result.returncode == 0
    for word in ("run", "probes", "report", "runs", "exit codes", "--baseline"):
        assert word in result.stdout
    bare = run_canary_here(cwd=tmp_path)
    assert bare.returncode == 2


def test_stack_flags_reach_the_stack_settings_and_win_over_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)  # --cwd is relative to where the command is typed
    (tmp_path / "proj").mkdir()
    (tmp_path / "canary.toml").write_text(
        '[stack]\nenv = { FROM_CONFIG = "1" }\nreruns = 5\ntimeout_s = 100.0\n'
    )
    flags = ["--env", "A=1", "--env", "B=x=y", "--cwd", "proj"]
    flags += ["--reruns", "0", "--command-timeout", "30", "--test-timeout", "0"]
    args = build_parser().parse_args(["stack", "pytest -q", *flags])
    stack = load_settings(None, flags_from_args(args), tmp_path).plan.settings["stack"]
    assert stack["env"] == {"A": "1", "B": "x=y"}
    assert (stack["reruns"], stack["timeout_s"], stack["test_timeout_s"]) == (0, 30.0, 0.0)
    assert Path(stack["cwd"]) == (tmp_path / "proj").resolve()
    untouched = build_parser().parse_args(["stack", "pytest -q"])
    stack = load_settings(None, flags_from_args(untouched), tmp_path).plan.settings["stack"]
    assert (stack["env"], stack["reruns"], stack["timeout_s"]) == ({"FROM_CONFIG": "1"}, 5, 100.0)


def test_stack_env_flag_without_equals_is_a_usage_error(tmp_path: Path):
    result = run_canary_here("stack", "pytest", "--env", "OMP_NUM_THREADS", cwd=tmp_path)
    assert result.returncode == 2
    assert "'OMP_NUM_THREADS' is not KEY=VALUE" in result.stderr


def test_a_default_run_leaves_out_a_stack_it_has_no_command_for(tmp_path: Path):
    plan = load_settings(None, flags_from_args(build_parser().parse_args(["run"])), tmp_path).plan
    assert "stack" not in plan.sections and "claims" in plan.sections
    (tmp_path / "canary.toml").write_text('[stack]\ncommand = "pytest -q"\n')
    plan = load_settings(None, flags_from_args(build_parser().parse_args(["run"])), tmp_path).plan
    assert "stack" in plan.sections


def test_decision_is_never_go_when_an_asked_for_section_stored_nothing(tmp_path: Path):
    from torchcanary.plan import RunPlan
    from torchcanary.policy import decide
    from torchcanary.report.view import load_run_view
    from torchcanary.store.sqlite import SqliteStore

    plan = RunPlan("torch==2.13.0", "torch==2.14.1", sections=("stack",))
    with SqliteStore(tmp_path / "canary.db") as store:
        view = load_run_view(store, store.create_run(plan.to_json()))
    decision = decide(view, plan.policy, plan.sections, {})
    assert not decision.go
    assert any("stack" in reason for reason in decision.reasons)


@pytest.mark.parametrize("where", ["canary.toml", "pyproject.toml", "--config"])
def test_runs_and_report_read_the_store_and_output_of_the_config_file(tmp_path: Path, where: str):
    from torchcanary.plan import RunPlan
    from torchcanary.policy import decide
    from torchcanary.report.view import load_run_view
    from torchcanary.store.sqlite import SqliteStore

    table = 'store = "elsewhere/team.db"\noutput = "elsewhere/reports"\n'
    config_args: list[str] = []
    if where == "pyproject.toml":
        (tmp_path / where).write_text("[tool.torchcanary]\n" + table)
    elif where == "canary.toml":
        (tmp_path / where).write_text(table)
    else:
        (tmp_path / "team.toml").write_text(table)
        config_args = ["--config", "team.toml"]
    plan = RunPlan("torch==2.13.0", "torch==2.14.1", sections=("claims",))
    with SqliteStore(tmp_path / "elsewhere" / "team.db") as store:
        run_id = store.create_run(plan.to_json())
        view = load_run_view(store, run_id)
        decision = decide(view, plan.policy, plan.sections, {})
        store.finish_run(run_id, decision.label, decision.to_json())
    listed = run_canary_here("runs", *config_args, cwd=tmp_path, COLUMNS="200")
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    rendered = run_canary_here("report", "latest", *config_args, cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert (tmp_path / "elsewhere" / "reports").is_dir()
    assert not (tmp_path / "canary-results").exists()


@pytest.mark.parametrize("command", ["bench", "drill", "stack", "diff"])
def test_a_section_command_offers_only_flags_it_reads(command: str, tmp_path: Path) -> None:
    """Claims run only under ``run``; a section's own command must not offer probe flags."""
    shown = run_canary_here(command, "--help", cwd=tmp_path).stdout
    for claims_flag in ("--probes", "--probe-module", "--probe-timeout", "--release"):
        assert claims_flag not in shown
    assert shown.split("\n\n")[1].strip(), f"{command} --help should say what it does"


def test_the_claims_flags_on_run_set_the_claims_table_and_win_over_it(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text(
        '[claims]\nprobes = ["c10d.*"]\nprobe_timeout_s = 10\nrelease = "2.14"\n'
    )
    argv = ["run", "--only", "claims", "--probes", "sanity.*, nccl2.*", "--probe-timeout", "30"]
    argv += ["--regression", "2.13", "--probe-module", "ours.probes", "--fresh-claims"]
    plan = load_settings(None, flags_from_args(build_parser().parse_args(argv)), tmp_path).plan
    assert plan.section_settings("claims") == {
        "probes": ["sanity.*", "nccl2.*"],
        "probe_modules": ["ours.probes"],
        "probe_timeout_s": 30.0,
        "release": "2.14",
        "regression": ["2.13"],
        "reuse": False,
    }
    assert plan.outputs["probe_modules"] == ["ours.probes"]  # what the diff and calls read


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('probes = ["c10d.*"]', "probes"),
        ('probe_modules = ["ours.probes"]', "probe_modules"),
        ("probe_timeout_s = 30", "probe_timeout_s"),
        ('release = "2.14"', "release"),
        ('regression = ["2.13"]', "regression"),
    ],
)
def test_an_old_top_level_claims_key_is_refused_with_where_it_moved(
    tmp_path: Path, line: str, key: str
) -> None:
    (tmp_path / "canary.toml").write_text(line + "\n")
    result = run_canary_here("run", "--only", "claims", cwd=tmp_path)
    assert result.returncode == 2
    assert f"`{key}` is a claims setting: move it under [claims]" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_claims_setting_is_refused_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text("[claims]\nprobe_timeout_s = 0\n")
    with pytest.raises(ConfigError, match=r"\[tool.torchcanary.claims\] probe_timeout_s"):
        load_settings(None, {"sections": ["claims"]}, tmp_path)


def test_a_plan_of_schema_1_loads_with_its_claims_settings_in_the_claims_table() -> None:
    """A plan stored before the claims' settings moved (``--resume``, reports) still loads."""
    from torchcanary.plan import RunPlan
    from torchcanary.sections import load_plan

    stored = {
        "baseline": "torch==2.13.0",
        "candidate": "torch==2.14.1",
        "sections": ["claims", "diff"],
        "probes": ["c10d.*"],
        "probe_modules": ["ours.probes"],
        "installer": "auto",
        "probe_timeout_s": 30.0,
        "policy": {},
        "settings": {"claims": {"reuse": False}, "diff": {"notes": ["NOTES.md"]}},
        "release": "2.14",
        "regression": ["2.13"],
        "schema": 1,
    }
    with pytest.raises(ValueError, match=r"load it with sections\.load_plan"):
        RunPlan.from_json(stored)  # the registry knows where those keys belong now
    plan = load_plan(stored)
    assert plan.sections == ("claims", "diff")
    assert plan.section_settings("claims") == {
        "reuse": False,
        "probes": ["c10d.*"],
        "probe_modules": ["ours.probes"],
        "probe_timeout_s": 30.0,
        "release": "2.14",
        "regression": ["2.13"],
    }
    assert plan.outputs == {"probe_modules": ["ours.probes"], "release_notes": ["NOTES.md"]}
    assert plan.to_json()["schema"] == 2
    assert RunPlan.from_json(plan.to_json()) == plan


def test_a_run_with_a_workload_records_its_calls_as_the_bench_offers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --workload``: the bench's flag; the calls record it (the bench's output) even
    where the bench does not time it (``--only diff,calls``)."""
    monkeypatch.chdir(tmp_path)  # a file target is relative to where the command is typed
    (tmp_path / "steps.py").write_text("def make_step():\n    return lambda: None\n")
    target = f"{tmp_path / 'steps.py'}:make_step"
    for argv in (["run"], ["run", "--only", "diff,calls"]):
        args = build_parser().parse_args([*argv, "--workload", "steps.py:make_step"])
        settings = load_settings(None, flags_from_args(args), tmp_path)
        assert "calls" in settings.plan.sections, argv
        assert settings.plan.outputs["workloads"] == [{"kind": "workload", "target": target}]
        assert settings.plan.section_settings("calls")["workloads"] == []  # not its own


def test_an_output_offered_by_two_sections_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchcanary import sections

    for name in ("claims", "diff"):
        monkeypatch.setattr(
            type(sections.get_section(name)), "outputs", lambda self, s: {"same": 1}
        )
    with pytest.raises(ConfigError, match="sections 'claims' and 'diff' both offer the output"):
        load_settings(None, {"sections": ["claims", "diff"]}, tmp_path)
