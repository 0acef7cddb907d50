"""The drill verdicts are one vocabulary: stored by value, each with its JUnit status; a
drill repeated where the versions disagree makes one verdict of its trials."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from rich.console import Console

from torchcanary.context import ROLES, RunContext
from torchcanary.drill import repeats, report, section
from torchcanary.drill.catalog import DrillSpec
from torchcanary.drill.drill import DrillOutcome
from torchcanary.drill.result import SCHEMA_VERSION as DRILL_SCHEMA_VERSION
from torchcanary.drill.result import DrillRun, DrillVerdict, from_json
from torchcanary.drill.section import drill_runs
from torchcanary.envs.cache import Environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.json_out import render_json
from torchcanary.report.view import load_run_view
from torchcanary.results import RECORD_SCHEMA_KEY
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore


def test_every_drill_verdict_has_the_junit_status_a_ci_expects() -> None:
    rows = [
        SectionResult("drill", f"kill:{v.value}", "candidate", v.value, {"reason": "why"})
        for v in DrillVerdict
    ]
    statuses = {
        case.name.split(":")[1].split(" ")[0]: case.status
        for case in report.junit_cases(SimpleNamespace(sections={"drill": rows}))
    }
    assert statuses == {
        "passed": "passed",
        "failed": "failure",
        "absent": "skipped",
        "not-checkable": "skipped",
        "error": "error",
        "flaky": "failure",
    }


def test_a_drill_verdict_reads_and_compares_as_its_stored_text() -> None:
    outcome = DrillOutcome(DrillVerdict.NOT_CHECKABLE, {})
    assert outcome.verdict == "not-checkable" and outcome.verdict.value == "not-checkable"
    assert DrillVerdict("passed") is DrillVerdict.PASSED


# repeated trials (drill/repeats.py) ----------------------------------------------------
class ScriptedRunner:
    """Plays back each environment's verdicts, trial after trial, instead of running a job:
    what is under test is when the section repeats a drill and what it stores and claims."""

    scripts: ClassVar[dict[tuple[str, str], list[str]]] = {}

    def __init__(self, python: str, *_: object, **__: object) -> None:
        self.role = python  # the test's environments are named by role
        self.runs: dict[str, int] = {}

    def run(self, spec: DrillSpec) -> DrillOutcome:
        trial = self.runs.get(spec.key, 0)
        self.runs[spec.key] = trial + 1
        verdict = DrillVerdict(self.scripts[spec.key, self.role][trial])
        first_error = None if verdict is DrillVerdict.PASSED else f"gloo: Read error {trial + 1}"
        payload = {
            "spec": spec.to_json(),
            "reason": f"{verdict} by script",
            "first_error": first_error,
            "detect_s": 1.0 + trial,
            "duration_s": 10.0,
        }
        return DrillOutcome(verdict, payload)

    def references(self) -> list[dict]:
        return []


def _scripted_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table: dict,
    scripts: dict,
    console_log: io.StringIO | None = None,
    roles: tuple[str, ...] = ROLES,
    resume_of: tuple[SqliteStore, str] | None = None,
) -> tuple[SqliteStore, str]:
    """The drill section run on ``scripts`` (a new run, or ``resume_of`` resumed)."""
    monkeypatch.setattr(section, "DrillRunner", ScriptedRunner)
    monkeypatch.setattr(ScriptedRunner, "scripts", scripts)
    settings = section.parse_settings({"faults": sorted({key for key, _ in scripts}), **table})
    plan = RunPlan("b", "c", sections=("drill",), settings={"drill": settings})
    store, run_id = resume_of or (SqliteStore(tmp_path / "canary.db"), "")
    run_id = run_id or store.create_run(plan.to_json())
    environments = {
        role: Environment(role, parse_env_spec("torch"), role, str(tmp_path), "2.x", True, 0.0)
        for role in roles
    }
    console = Console(file=console_log, width=80) if console_log is not None else None
    progress = Progress(console, quiet=console_log is None)
    work = tmp_path / "work"
    ctx = RunContext(run_id, store, plan, environments, tmp_path, work, progress)
    section.run(replace(ctx, resume=resume_of is not None))
    return store, run_id


def test_versions_that_disagree_on_one_trial_are_repeated_and_claimed_only_when_the_trials_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 13: kill:restart and hang:restart failed once in 2.13.0 and passed in
    2.14.1. Where the environments disagree the drill is repeated (3 trials each by
    default); a regression blocks only when every baseline trial passed and no candidate
    trial did; a version that passes some trials is flaky, shown with each failure's first
    error, and claims nothing. Drills that agree run once. The progress never wraps a line."""
    scripts = {
        ("kill:restart", "baseline"): ["passed", "passed", "passed"],
        ("kill:restart", "candidate"): ["failed", "failed", "error"],
        ("hang:restart", "baseline"): ["failed", "passed", "failed"],
        ("hang:restart", "candidate"): ["passed", "passed", "passed"],
        ("kill:restart-unshared", "baseline"): ["passed"],
        ("kill:restart-unshared", "candidate"): ["passed"],
    }
    log = io.StringIO()
    store, run_id = _scripted_run(tmp_path, monkeypatch, {}, scripts, log)
    with store:
        view = load_run_view(store, run_id)
    rows = {(r.key, r.env_role): r for r in section.drill_runs(view)}
    trials = {key: [t["verdict"] for t in (r.trials or ())] for key, r in rows.items()}
    assert trials == {key: verdicts for key, verdicts in scripts.items()}
    verdicts = {key: r.verdict.value for key, r in rows.items()}
    assert verdicts[("kill:restart", "candidate")] == "failed"
    assert verdicts[("hang:restart", "baseline")] == "flaky"
    flaky = rows[("hang:restart", "baseline")]
    assert flaky.reason == "trial 1 failed: gloo: Read error 1; trial 3 failed: gloo: Read error 3"
    assert flaky.detect_s == 1.0  # the figures are those of its first trial that failed
    assert section.blocking_reasons(view, {}) == [
        "drill kill:restart passed in the baseline but is failed in the candidate (3 of 3 "
        "trials against 0 of 3): trial 1 failed: gloo: Read error 1; "
        "trial 2 failed: gloo: Read error 2; trial 3 error: gloo: Read error 3"
    ]

    # k of n in every report format
    page = report.html(view)
    assert "<td>flaky (1 of 3 passed)</td>" in page
    assert "<td>passed (1 of 1 passed)</td>" in page
    assert (
        "Between the versions: passed 1 of 3 trials in the baseline and 3 of 3 in the "
        "candidate: no difference claimed" in page
    )
    assert "the baseline does better, a difference the trials support" in page
    markdown = report.markdown(view)
    assert "- `hang:restart` baseline (–): **flaky** (1 of 3 passed); " in markdown
    assert "- `kill:restart` between the versions: passed 3 of 3 trials in the baseline" in (
        markdown
    )
    cases = {case.name: case for case in report.junit_cases(view)}
    assert cases["hang:restart [baseline]"].status == "failure"
    assert cases["hang:restart [baseline]"].message == (
        "1 of 3 trials passed: trial 1 failed: gloo: Read error 1; "
        "trial 3 failed: gloo: Read error 3"
    )
    stored = {
        (row["key"], row["env_role"]): row["payload"]
        for row in render_json(view)["sections"]["drill"]
    }
    assert stored[("hang:restart", "baseline")]["schema"] == DRILL_SCHEMA_VERSION
    assert [t["verdict"] for t in stored[("hang:restart", "baseline")]["trials"]] == [
        "failed",
        "passed",
        "failed",
    ]
    assert stored[("hang:restart", "baseline")]["trials"][0]["first_error"] == (
        "gloo: Read error 1"
    )

    lines = log.getvalue().splitlines()
    assert "  [2/6, " in log.getvalue()
    assert any(
        line.startswith("hang:restart: failed in the baseline, passed in the candidate; 3 trials")
        for line in lines
    )
    assert any(
        line.endswith("baseline hang:restart: flaky (1 of 3 trials passed)") for line in lines
    )
    assert not [line for line in lines if line.endswith(": ")]


def test_trials_asked_for_run_every_drill_that_many_times_and_agreeing_ones_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 13: ``trials = 2`` runs each drill twice in each environment; a
    disagreement then adds trials up to ``disagreement_trials``; repeats turned off
    (``disagreement_trials = 1``) let one trial decide, as before."""
    scripts = {
        ("kill:restart", "baseline"): ["passed", "passed", "passed", "passed"],
        ("kill:restart", "candidate"): ["passed", "failed", "failed", "failed"],
        ("hang:timeout", "baseline"): ["passed", "passed"],
        ("hang:timeout", "candidate"): ["passed", "passed"],
    }
    table = {"trials": 2, "disagreement_trials": 4}
    store, run_id = _scripted_run(tmp_path, monkeypatch, table, scripts)
    with store:
        view = load_run_view(store, run_id)
    counts = {(r.key, r.env_role): (r.trials_passed, r.trial_count) for r in drill_runs(view)}
    assert counts == {
        ("kill:restart", "baseline"): (4, 4),
        ("kill:restart", "candidate"): (1, 4),
        ("hang:timeout", "baseline"): (2, 2),
        ("hang:timeout", "candidate"): (2, 2),
    }
    assert section.blocking_reasons(view, {}) == []  # 4 of 4 against 1 of 4: not claimed

    once = {("kill:restart", "baseline"): ["passed"], ("kill:restart", "candidate"): ["failed"]}
    store, run_id = _scripted_run(tmp_path / "off", monkeypatch, {"disagreement_trials": 1}, once)
    with store:
        view = load_run_view(store, run_id)
    assert [r.trial_count for r in drill_runs(view)] == [1, 1]
    assert len(section.blocking_reasons(view, {})) == 1


def test_a_resumed_run_repeats_the_missing_environment_against_the_stored_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 13: resumed with the baseline stored (one pass), a candidate that
    fails is repeated (the baseline, already stored, is not)."""
    scripts = {
        ("kill:restart", "baseline"): ["passed"],
        ("kill:restart", "candidate"): ["failed", "passed", "failed"],
    }
    first = _scripted_run(tmp_path, monkeypatch, {}, scripts, roles=("baseline",))
    store, run_id = _scripted_run(tmp_path, monkeypatch, {}, scripts, resume_of=first)
    with store:
        view = load_run_view(store, run_id)
    counts = {
        r.env_role: (r.verdict.value, r.trials_passed, r.trial_count) for r in drill_runs(view)
    }
    assert counts == {"baseline": ("passed", 1, 1), "candidate": ("flaky", 1, 3)}
    assert section.blocking_reasons(view, {}) == []


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"trials": 0}, "trials: expected an integer from 1 to 10, got 0"),
        ({"disagreement_trials": "3"}, "whole"),
    ],
)
def test_bad_trial_counts_are_one_clear_config_error(table: dict, words: str) -> None:
    """Issue 28 item 13: the trial counts are checked like every other drill setting."""
    with pytest.raises(ConfigError, match=words):
        section.parse_settings(table)


def test_a_row_stored_before_trials_reads_as_one_trial_and_is_written_back_unchanged() -> None:
    """Issue 28 item 13: schema 2 added ``trials``; a version 1 row is one trial, still
    version 1 when written again, and claims a difference on that one trial as it did."""
    old = {"key": "kill:restart", "env_role": "baseline", "verdict": "passed", "payload": {}}
    record = from_json(old)
    assert isinstance(record, DrillRun) and record.trials is None
    assert (record.trials_passed, record.trial_count) == (1, 1)
    assert record.to_json()["payload"] == {RECORD_SCHEMA_KEY: 1}
    failed = from_json({**old, "env_role": "candidate", "verdict": "failed"})
    assert isinstance(failed, DrillRun) and (failed.trials_passed, failed.trial_count) == (0, 1)
    assert repeats.compare(record, failed).better == "baseline"


@pytest.mark.parametrize(
    ("verdicts", "combined"),
    [
        (["passed", "passed"], "passed"),
        (["failed", "passed"], "flaky"),
        (["error", "failed"], "failed"),
        (["error", "error"], "error"),
    ],
)
def test_trials_make_one_verdict(verdicts: list[str], combined: str) -> None:
    """Issue 28 item 13: the trials' verdict when they agree, flaky when some passed."""
    assert repeats.combined_verdict([DrillVerdict(v) for v in verdicts]).value == combined


def test_only_a_pass_against_a_miss_is_a_disagreement_worth_repeating() -> None:
    """Issue 28 item 13: absent and not-checkable are facts of a version or a machine, not
    luck: they are not repeated."""
    passed, failed, error = DrillVerdict.PASSED, DrillVerdict.FAILED, DrillVerdict.ERROR
    assert repeats.disagree([passed], [failed]) and repeats.disagree([error], [passed])
    assert not repeats.disagree([passed], [DrillVerdict.ABSENT])
    assert not repeats.disagree([passed], [DrillVerdict.NOT_CHECKABLE])
    assert not repeats.disagree([failed], [failed])
    assert not repeats.disagree([passed, failed], [failed])


# issue 38 item 4: "not checkable here" is only what the machine cannot do -----------------
def _trials(role: str, *verdicts: str) -> DrillRun:
    trials = [{"verdict": v, "reason": f"trial {v}"} for v in verdicts]
    record = from_json(
        {
            "key": "kill:restart",
            "env_role": role,
            "verdict": verdicts[0],
            "payload": {"trials": trials},
        }
    )
    assert isinstance(record, DrillRun)
    return record


def test_a_drill_not_checkable_in_one_version_only_claims_no_difference() -> None:
    """It was reported as a regression backed by trials: a false no-go."""
    passed = _trials("baseline", "passed", "passed", "passed")
    unknown = _trials("candidate", "not-checkable", "not-checkable", "not-checkable")
    assert repeats.compare(passed, unknown).better is None
    errored = _trials("candidate", "error", "error", "error")
    assert repeats.compare(passed, errored).better is None
    view = SimpleNamespace(
        sections={
            "drill": [
                SectionResult.of("drill", passed),
                SectionResult.of("drill", replace(unknown, verdict=DrillVerdict.NOT_CHECKABLE)),
            ]
        }
    )
    assert section.blocking_reasons(view, {}) == []
    # A difference the judged trials support is still claimed.
    failed = _trials("candidate", "failed", "failed", "not-checkable")
    assert repeats.compare(passed, failed).better == "baseline"


def test_memory_short_at_launch_is_an_error_and_a_machine_too_small_not_checkable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A momentary shortfall (memory others hold now) became an honest "cannot check here"."""
    from torchcanary.drill import launch
    from torchcanary.drill.drill import DrillRunner

    spec = DrillSpec("kill", "restart", ranks=2)
    runner = DrillRunner("/nonexistent/python", tmp_path, tmp_path)
    busy = "MemTotal:       67108864 kB\nMemAvailable:     524288 kB\n"  # 64 GiB, 0.5 free
    monkeypatch.setattr(launch, "_meminfo", lambda: busy)
    outcome = runner.run(spec)
    assert outcome.verdict is DrillVerdict.ERROR
    assert outcome.payload["reason"] == (
        "2 ranks need about 1.8 GiB but only 0.5 GiB of 64.0 GiB were free at launch: "
        "run it again when the machine is quieter"
    )
    small = "MemTotal:        1048576 kB\nMemAvailable:     524288 kB\n"  # 1 GiB in all
    monkeypatch.setattr(launch, "_meminfo", lambda: small)
    outcome = runner.run(spec)
    assert outcome.verdict is DrillVerdict.NOT_CHECKABLE
    assert "this machine has 1.0 GiB: lower drill.ranks" in outcome.payload["reason"]


def test_a_fault_that_could_not_be_injected_is_an_error_not_a_machine_fact(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An `ip`/`tc` failure once the namespaces stood is our failure, not "cannot check"."""
    from torchcanary.drill import drill, launch
    from torchcanary.drill.netns import NetworkUnavailable

    class Namespaces:
        store_address = "10.0.0.1"

        def __enter__(self) -> Namespaces:
            return self

        def close(self) -> None:
            pass

    def drive(*args: object) -> None:
        raise NetworkUnavailable("'tc qdisc add dev tcv1 root tbf' failed: RTNETLINK answers")

    monkeypatch.setattr(
        launch, "_meminfo", lambda: "MemTotal: 67108864 kB\nMemAvailable: 67108864 kB\n"
    )
    monkeypatch.setattr(drill, "network_unavailable", lambda need_tc: None)
    monkeypatch.setattr(drill, "RankNetwork", lambda token, ranks: Namespaces())
    monkeypatch.setattr(drill.DrillRunner, "_drive", drive)
    outcome = drill.DrillRunner("/nonexistent/python", tmp_path, tmp_path).run(
        DrillSpec("net-slow", "timeout", ranks=2)
    )
    assert outcome.verdict is DrillVerdict.ERROR
    assert outcome.payload["reason"] == (
        "injecting net-slow failed: 'tc qdisc add dev tcv1 root tbf' failed: RTNETLINK answers"
    )
