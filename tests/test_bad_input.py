"""Every user mistake is one clear line, exit status 2, and nothing half-written.

The command line runs in the test's own process (``run_canary_here``) but where the
process is the point: a failed environment build, and plugins found on ``PYTHONPATH``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run_canary, run_canary_here
from torchcanary.store.schema import SCHEMA_VERSION


def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("torchcanary:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_unknown_config_key_names_the_key_and_the_known_ones(tmp_path):
    (tmp_path / "canary.toml").write_text('baseline = "torch==2.13.0"\nbasline = "typo"\n')
    line = _one_line_error(run_canary_here("run", cwd=tmp_path))
    assert "'basline'" in line and "known keys" in line


def test_config_key_of_wrong_type_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.torchcanary]\nsections = 'claims'\n")
    assert "'sections' has the wrong type" in _one_line_error(run_canary_here("run", cwd=tmp_path))
    (tmp_path / "pyproject.toml").write_text("[tool.torchcanary.claims]\nprobes = 'c10d.*'\n")
    line = _one_line_error(run_canary_here("run", cwd=tmp_path))
    assert "[tool.torchcanary.claims] probes: expected a list of strings" in line


def test_an_unknown_installer_is_refused_with_the_choices(tmp_path):
    (tmp_path / "canary.toml").write_text('installer = "conda"\n')
    line = _one_line_error(run_canary_here("run", cwd=tmp_path))
    assert "'conda'" in line and "auto, uv, pip" in line


def test_invalid_toml_is_refused_with_the_file_name(tmp_path):
    (tmp_path / "canary.toml").write_text("baseline = \n")
    assert "canary.toml is not valid TOML" in _one_line_error(run_canary_here("run", cwd=tmp_path))


def test_spec_that_is_not_a_requirement_is_refused(tmp_path):
    line = _one_line_error(run_canary_here("run", "--baseline", "torch==2.13.0 ;rm", cwd=tmp_path))
    assert "not a pip requirement" in line


def test_spec_without_torch_is_refused(tmp_path):
    line = _one_line_error(run_canary_here("run", "--candidate", "numpy", cwd=tmp_path))
    assert "does not name torch" in line


def test_missing_interpreter_is_refused(tmp_path):
    line = _one_line_error(
        run_canary_here("run", "--baseline", "python:/no/such/python", cwd=tmp_path)
    )
    assert "/no/such/python does not exist" in line


def test_unknown_section_is_refused(tmp_path):
    assert "unknown section 'clams'" in _one_line_error(
        run_canary_here("run", "--only", "clams", cwd=tmp_path)
    )


# The probe pattern is matched only once both environments are there (their manifests
# name the probes each can run), so this refusal comes after they are built or reused.
@pytest.mark.torch_envs
def test_unknown_probe_is_refused(tmp_path):
    assert "no probe matches 'nosuch.*'" in _one_line_error(
        run_canary_here("run", "--only", "claims", "--probes", "nosuch.*", cwd=tmp_path)
    )


def test_unknown_policy_key_is_refused(tmp_path):
    (tmp_path / "policy.toml").write_text("[policy]\nmax_slowdonw = 0.1\n")
    line = _one_line_error(
        run_canary_here("run", "--only", "claims", "--policy", "policy.toml", cwd=tmp_path)
    )
    assert "unknown policy key 'max_slowdonw'" in line


def test_missing_policy_file_is_refused(tmp_path):
    assert "does not exist" in _one_line_error(
        run_canary_here("run", "--only", "claims", "--policy", "nope.toml", cwd=tmp_path)
    )


@pytest.mark.torch_envs
def test_package_that_cannot_be_installed_fails_cleanly_and_leaves_no_half_built_env(
    tmp_path, baseline_env
):
    """The candidate is built in an empty cache; the baseline is the session's environment
    named by its interpreter, so the run does not first build a whole torch to get there."""
    cache = tmp_path / "cache"
    result = run_canary(
        "run",
        "--only",
        "claims",
        "--baseline",
        f"python:{baseline_env.python}",
        "--candidate",
        "torch==2.13.0 torchcanary-no-such-package-xyz==1.0",
        cwd=tmp_path,
        TORCHCANARY_CACHE=str(cache),
    )
    line = _one_line_error(result)
    assert "failed" in line and "log" in line
    envs = cache / "envs"
    built = [p.name for p in envs.iterdir() if p.is_dir()] if envs.exists() else []
    assert all(not name.endswith(".building") for name in built)
    db = tmp_path / "canary-results" / "canary.db"
    if db.exists():  # the store may exist, but it holds no husk of a run
        with sqlite3.connect(db) as connection:
            assert connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_store_newer_than_this_torchcanary_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "canary.db"
    with sqlite3.connect(db) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    before = db.read_bytes()
    line = _one_line_error(run_canary_here("runs", "--store", str(db), cwd=tmp_path))
    assert "newer than this torchcanary" in line
    assert db.read_bytes() == before


def test_report_for_unknown_run_points_to_runs(tmp_path):
    from torchcanary.store.sqlite import SqliteStore

    SqliteStore(tmp_path / "canary.db").close()
    line = _one_line_error(run_canary_here("report", "nope", "--store", "canary.db", cwd=tmp_path))
    assert "torchcanary runs" in line


@pytest.mark.parametrize("command", ["runs", "report latest", "run --only claims"])
def test_a_file_that_is_not_a_store_is_refused_and_left_untouched(tmp_path, command):
    notes = tmp_path / "notes.txt"
    notes.write_text("root:x:0:0:root:/root:/bin/bash\n")
    before = notes.read_bytes()
    line = _one_line_error(run_canary_here(*command.split(), "--store", str(notes), cwd=tmp_path))
    assert str(notes) in line and "not a torchcanary store" in line and "--store" in line
    assert notes.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no journal, no WAL


def test_another_programs_sqlite_database_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE accounts (name TEXT)")
    connection.close()
    before = db.read_bytes()
    line = _one_line_error(run_canary_here("runs", "--store", str(db), cwd=tmp_path))
    assert str(db) in line and "not a torchcanary store" in line
    assert db.read_bytes() == before


def test_a_store_path_that_cannot_be_created_is_a_usage_error(tmp_path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    for path in ("/proc/x/y.db", str(blocker / "y.db"), str(tmp_path)):
        line = _one_line_error(
            run_canary_here("run", "--only", "claims", "--store", path, cwd=tmp_path)
        )
        assert path in line and "--store" in line


def _no_environment_built(cache) -> bool:
    envs = cache / "envs"
    return not envs.exists() or not any(envs.iterdir())


@pytest.mark.parametrize(
    "argv",
    [
        ["stack", ""],
        ["stack", "  "],
        ["run", "--stack", ""],
        ["run", "--only", "claims,stack"],
    ],
)
def test_a_named_section_without_its_command_is_refused_before_building(tmp_path, argv):
    cache = tmp_path / "cache"
    result = run_canary_here(*argv, cwd=tmp_path, TORCHCANARY_CACHE=str(cache))
    line = _one_line_error(result)
    assert "stack" in line and "command" in line and "pytest" in line
    assert _no_environment_built(cache)
    assert not (tmp_path / "canary-results").exists()


def test_a_stack_named_in_the_config_without_a_command_is_refused(tmp_path):
    (tmp_path / "canary.toml").write_text('sections = ["stack"]\n[stack]\ncommand = ""\n')
    cache = tmp_path / "cache"
    result = run_canary_here("run", cwd=tmp_path, TORCHCANARY_CACHE=str(cache))
    assert "command" in _one_line_error(result)
    assert _no_environment_built(cache)


@pytest.mark.parametrize("command", ["runs", "run --only claims", "store migrate"])
def test_an_unknown_store_scheme_is_one_line_without_its_password(tmp_path, command):
    """Issue 28 item 8: a URL of a database torchcanary does not speak is refused in one
    line naming its scheme and the forms understood, and is never taken for a file path."""
    url = "mysql+pymysql://ci:hunter2-pw@db.example/canary"
    line = _one_line_error(run_canary_here(*command.split(), "--store", url, cwd=tmp_path))
    assert "unknown store scheme 'mysql+pymysql'" in line and "postgresql://" in line
    assert "mysql+pymysql://ci:***@db.example/canary" in line and "hunter2-pw" not in line
    assert list(tmp_path.iterdir()) == []


BROKEN_PLUGINS = {
    "cannot import": "import canary_nonexistent_dependency\n",
    "breaks the contract": "SECTION = object()\n",
}


@pytest.mark.parametrize("fault", sorted(BROKEN_PLUGINS))
@pytest.mark.parametrize("command", ["--help", "runs"])
def test_a_broken_third_party_section_is_one_line_exit_2_naming_it_and_its_package(
    tmp_path, fault, command
):
    """Issue 28 item 9: a section plugin that fails to load, or breaks the contract, is a
    configuration error (exit 2, not the no-go code) of one line naming the entry point and
    the distribution that installed it, with no traceback."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "canary_broken.py").write_text(BROKEN_PLUGINS[fault])
    info = plugins / "canary_broken-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: canary-broken\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(
        "[torchcanary.sections]\nbrokenpart = canary_broken:SECTION\n"
    )
    result = run_canary(*command.split(), cwd=tmp_path, PYTHONPATH=str(plugins))
    line = _one_line_error(result)
    assert "'brokenpart'" in line and "canary-broken" in line
    assert ("ModuleNotFoundError" in line) == (fault == "cannot import")
    assert "uninstall" in line


RAISES = "        raise RuntimeError('boom')\n"
RAISING_HOOKS = {
    "add_flags": "    def add_flags(self, parser, own_command):\n" + RAISES,
    "add_commands": "    def add_commands(self, commands):\n" + RAISES,
}


@pytest.mark.parametrize("hook", sorted(RAISING_HOOKS))
def test_a_section_plugin_whose_cli_hook_raises_is_one_line_exit_2_naming_it(tmp_path, hook):
    """Issue 38 item 6: it was a traceback and exit 1, the no-go code."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "canary_hooked.py").write_text(
        "from dataclasses import dataclass\n"
        "from canary_footprint import FootprintSection\n\n\n"
        "@dataclass(frozen=True)\n"
        "class Hooked(FootprintSection):\n"
        "    name: str = 'hooked'\n" + RAISING_HOOKS[hook] + "\n\nSECTION = Hooked()\n"
    )
    info = plugins / "canary_hooked-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: canary-hooked\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[torchcanary.sections]\nhooked = canary_hooked:SECTION\n"
    )
    third_party = Path(__file__).parent / "fixtures" / "third_party_section"
    result = run_canary("runs", cwd=tmp_path, PYTHONPATH=f"{plugins}:{third_party}")
    assert result.returncode == 2, result.stderr
    assert _one_line_error(result) == (
        f"torchcanary: error: section plugin 'hooked': {hook}() failed: RuntimeError: boom; "
        "fix or uninstall that package (--debug: traceback)"
    )
