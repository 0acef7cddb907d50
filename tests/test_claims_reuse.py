"""Claim verdicts kept for later runs of the same environments, and reused only while every
input they depend on is unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli_helpers import run_canary
from torchcanary.claims.kept_verdicts import REUSED, KeptVerdicts
from torchcanary.envs.cache import Environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.results import Manifest

FACTS = {"torch_version": "2.13.0+cpu", "torch_git_version": "abc", "cpu_model": "Xeon"}


def _environment(role: str, spec: str = "torch==2.13.0 numpy") -> Environment:
    return Environment(role, parse_env_spec(spec), "/venv/bin/python", "/venv", "2.13.0", True, 0)


def _reuse(
    tmp_path: Path,
    fresh: bool = False,
    warn=None,
    spec: str = "torch==2.13.0 numpy",
    profile: str = "",
    **facts: str,
) -> KeptVerdicts:
    return KeptVerdicts(
        tmp_path / "kept",
        {"baseline": _environment("baseline", spec)},
        {"baseline": Manifest({**FACTS, **facts})},
        profile,
        fresh=fresh,
        warn=warn or (lambda message: None),
    )


@pytest.fixture
def probe_module(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "mods"
    folder.mkdir()
    module = folder / "canary_reuse_probe.py"
    module.write_text("PROBES = []\n")
    monkeypatch.syspath_prepend(str(folder))
    return module


def _key(reuse: KeptVerdicts, params=None, timeout_s: float = 60.0):
    return reuse.key("baseline", "p.one", "canary_reuse_probe", params or {"t": "2.13"}, timeout_s)


def test_the_key_stays_for_the_same_inputs_and_changes_with_each_of_them(tmp_path, probe_module):
    first = _key(_reuse(tmp_path))
    assert first is not None and first == _key(_reuse(tmp_path))
    changed = {
        "manifest": _key(_reuse(tmp_path, torch_git_version="def")),
        "params": _key(_reuse(tmp_path), params={"t": "2.14"}),
        "timeout": _key(_reuse(tmp_path), timeout_s=30.0),
        # Fleet nodes of two profiles on identical hardware: one never answers for the other.
        "profile": _key(_reuse(tmp_path, profile="plain-box")),
    }
    probe_module.write_text("PROBES = []  # changed\n")
    changed["probe file"] = _key(_reuse(tmp_path))
    keys = {name: key.key for name, key in changed.items() if key is not None}
    assert len(keys) == 5 and first.key not in keys.values(), changed
    assert len(set(keys.values())) == 5


def test_never_kept_for_an_environment_that_can_change_or_a_probe_of_unknown_origin(
    tmp_path, probe_module
):
    assert _key(_reuse(tmp_path, spec="current")) is None
    assert _key(_reuse(tmp_path, spec=f"python:{sys.executable}")) is None
    reuse = _reuse(tmp_path)
    assert reuse.key("baseline", "p", "no_such_module_here", {}, 1.0) is None
    assert reuse.key("candidate", "p", "canary_reuse_probe", {}, 1.0) is None  # no manifest


def _result(verdict: Verdict, run_id: str = "run-1") -> ProbeResult:
    outcome = Outcome(verdict, "why", {"fact": 1}, {"seconds": [0.5, 0.6]})
    return ProbeResult(run_id, "baseline", "p.one", outcome, 2.5, 100.0)


def test_kept_verdicts_come_back_marked_with_their_run_and_failures_are_never_kept(
    tmp_path, probe_module
):
    reuse = _reuse(tmp_path)
    key = _key(reuse)
    assert key is not None and reuse.load(key, "run-2", "baseline", "p.one") is None
    for verdict in (Verdict.ERROR, Verdict.CRASHED, Verdict.TIMEOUT):
        reuse.keep(key, _result(verdict))
        assert not reuse.cache.path(key.key).exists()
    reuse.keep(key, _result(Verdict.REFUTED))
    found = reuse.load(key, "run-2", "baseline", "p.one")
    assert found is not None and found.run_id == "run-2"
    assert found.outcome.verdict is Verdict.REFUTED and found.outcome.summary == "why"
    assert found.outcome.measurements == {"seconds": [0.5, 0.6]} and found.duration_s == 2.5
    assert found.outcome.evidence["fact"] == 1
    assert found.outcome.evidence[REUSED]["run_id"] == "run-1"
    entry = json.loads(reuse.cache.path(key.key).read_text())
    reuse.keep(key, found)  # a reused result is not written back as new
    assert json.loads(reuse.cache.path(key.key).read_text()) == entry
    assert _reuse(tmp_path, fresh=True).load(key, "run-3", "baseline", "p.one") is None


def test_an_unreadable_entry_is_ignored_with_one_warning(tmp_path, probe_module):
    warnings: list[str] = []
    reuse = _reuse(tmp_path, warn=warnings.append)
    key = _key(reuse)
    assert key is not None
    reuse.cache.directory.mkdir(parents=True)
    reuse.cache.path(key.key).write_text("{not json")
    assert reuse.load(key, "run-2", "baseline", "p.one") is None
    assert len(warnings) == 1 and warnings[0].startswith("ignoring the kept claim verdict")


@pytest.mark.torch_envs
def test_a_second_run_reuses_every_verdict_and_fresh_claims_runs_them_again(tmp_path):
    """Also issue 28 item 12 (once its own test in test_report_markdown.py, merged here: the
    same two runs): the time line of summary.md and the terminal names the claim verdicts
    kept, none in a first run, all of them in a rerun of the same environments."""
    argv = ["run", "--only", "claims", "--probes", "sanity.version-pin,sanity.gloo-init"]

    def run(*extra: str) -> dict:
        result = run_canary(*argv, *extra, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        data = json.loads((tmp_path / "canary-results" / "latest" / "results.json").read_text())
        data["stderr"], data["stdout"] = result.stderr, result.stdout
        data["summary"] = (tmp_path / "canary-results" / "latest" / "summary.md").read_text()
        return data

    def reused(data: dict) -> list:
        return [
            data["claims"][i][role]["outcome"]["evidence"].get(REUSED)
            for i in range(len(data["claims"]))
            for role in ("baseline", "candidate")
        ]

    first = run()
    assert reused(first) == [None] * 4
    assert "Time: environments" in first["summary"] and "Reused from" not in first["summary"]
    assert "Time: environments" in first["stdout"] and "Reused from" not in first["stdout"]
    second = run()
    kept = "Reused from earlier runs: 4 of 4 claim verdicts."
    assert kept in second["summary"] and kept in second["stdout"].splitlines()
    origins = reused(second)
    assert all(o is not None and o["run_id"] == first["run"]["run_id"] for o in origins), origins
    verdicts = [
        [c[r]["outcome"]["verdict"] for r in ("baseline", "candidate")] for c in first["claims"]
    ]
    assert verdicts == [
        [c[r]["outcome"]["verdict"] for r in ("baseline", "candidate")] for c in second["claims"]
    ]
    assert "4 verdicts reused from earlier runs" in " ".join(second["stderr"].split())
    assert "4 of 4 verdicts reused from earlier runs" in second["summary"]
    assert reused(run("--fresh-claims")) == [None] * 4
