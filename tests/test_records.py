"""Typed section results: every row reads as its section's versioned record and back, a run
stored before the records renders exactly as it did, and a policy word outside the ones a
key allows is refused before the run."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cli_helpers import run_canary_here
from torchcanary.bench.result import BenchMeasured, BenchSkipped
from torchcanary.context import RunContext
from torchcanary.diff.result import DiffChange, DiffSummary
from torchcanary.drill import section as drill_section
from torchcanary.drill.result import SCHEMA_VERSION as DRILL_SCHEMA_VERSION
from torchcanary.drill.result import DrillReference, DrillRun, DrillVerdict
from torchcanary.envs.cache import Environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.fleet.driver import _decide as fleet_decide
from torchcanary.history.commands import find_section
from torchcanary.plan import RunPlan
from torchcanary.policy import decide
from torchcanary.progress import Progress
from torchcanary.report.view import load_run_view
from torchcanary.results import RECORD_SCHEMA_KEY
from torchcanary.sections import get_section, load_plan, section_names
from torchcanary.stack.result import StackChange, StackRun, StackSummary
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

STORED = Path(__file__).parent / "fixtures" / "records"
RUN_ID = "20261203-211235-f57d7a"
# A drill run stored before the drill records (see fixtures/records/README.md).
DRILL_RUN_ID = "20261204-004048-9d191f"
TYPED = {
    "bench": (BenchMeasured, BenchSkipped),
    "stack": (StackRun, StackSummary, StackChange),
    "diff": (DiffSummary, DiffChange),
    "drill": (DrillRun, DrillReference),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run stored before the records, reported again by today's code (a copy of the store)."""
    work = tmp_path_factory.mktemp("records")
    shutil.copy(STORED / "before-records.db", work / "canary.db")
    result = run_canary_here("report", RUN_ID, "--store", "canary.db", "--output", "out", cwd=work)
    assert result.returncode == 0, result.stderr
    return work / "out" / RUN_ID


def _without_schema(results: dict[str, Any]) -> dict[str, Any]:
    for rows in results["sections"].values():
        for row in rows:
            row["payload"].pop(RECORD_SCHEMA_KEY, None)
    return results


def test_a_run_stored_before_the_records_reports_its_results_as_it_did(rendered: Path) -> None:
    now = json.loads((rendered / "results.json").read_text())
    before = json.loads((STORED / "before-records.results.json").read_text())
    # The one difference: each typed section's payload now says its schema version.
    assert {
        row["payload"][RECORD_SCHEMA_KEY] for name in TYPED for row in now["sections"][name]
    } == {1}
    now_sections = _without_schema(now)["sections"]
    for newer in ("explain", "calls"):  # sections newer than the stored run: no rows
        assert now_sections.pop(newer) == []
    assert now_sections == before["sections"]
    assert (now["decision"], now["decision_detail"]) == (
        before["decision"],
        before["decision_detail"],
    )
    # Every section's Markdown summary and JUnit case reads the records the same way.
    summary = (rendered / "summary.md").read_text()
    for heading in ("## Performance A/B", "## Your stack", "## What changed"):
        assert heading in (STORED / "before-records.summary.md").read_text()
        assert heading in summary
    junit = (rendered / "junit.xml").read_text()
    assert junit.count("<testcase") == (STORED / "before-records.junit.xml").read_text().count(
        "<testcase"
    )


def test_the_decision_read_from_the_records_is_the_one_the_run_made(tmp_path: Path) -> None:
    shutil.copy(STORED / "before-records.db", tmp_path / "canary.db")
    with SqliteStore(tmp_path / "canary.db") as store:
        view = load_run_view(store, RUN_ID)
    detail = view.run.decision_detail or {}
    plan = view.run.plan
    decision = decide(
        view, plan["policy"], tuple(plan["sections"]), detail.get("section_failures", {})
    )
    assert decision.label == view.run.decision == "no-go"
    assert list(decision.reasons) == detail["reasons"]
    assert any(reason.startswith("stack:") for reason in decision.reasons)
    assert any(reason.startswith("diff:") for reason in decision.reasons)


def test_every_row_of_results_json_is_its_sections_record_and_round_trips(
    rendered: Path, drills_rendered: Path
) -> None:
    sections = json.loads((rendered / "results.json").read_text())["sections"]
    # claims' results are ProbeResult records, under "claims" at the top level
    assert set(sections) == set(section_names()) - {"claims"}
    sections["drill"] = json.loads((drills_rendered / "results.json").read_text())["sections"][
        "drill"
    ]
    seen: set[type] = set()
    for name, rows in sections.items():
        for row in rows:
            record = get_section(name).record_from_json(row)
            assert record.to_json() == row
            if name in TYPED:
                assert isinstance(record, TYPED[name]), (name, row["key"])
                assert isinstance(record.verdict, enum.Enum)  # one vocabulary, declared
                seen.add(type(record))
    assert seen == {kind for kinds in TYPED.values() for kind in kinds}


def test_a_row_of_an_unknown_verdict_or_a_newer_schema_is_refused_by_name() -> None:
    row = {"key": "gemm/x", "env_role": "both", "verdict": "slower", "payload": {}}
    with pytest.raises(ValueError, match="'slowish' is not a valid BenchVerdict"):
        get_section("bench").record_from_json({**row, "verdict": "slowish"})
    with pytest.raises(ValueError, match="schema 2 is not one this torchcanary reads"):
        get_section("bench").record_from_json({**row, "payload": {RECORD_SCHEMA_KEY: 2}})


def test_facts_a_record_does_not_know_are_kept_when_it_is_written_again() -> None:
    row = {
        "key": "gemm/x",
        "env_role": "both",
        "verdict": "same",
        "payload": {RECORD_SCHEMA_KEY: 1, "ratio": 1.0, "workload": {"name": "mine"}},
    }
    record = get_section("bench").record_from_json(row)
    assert isinstance(record, BenchMeasured) and record.ratio == 1.0
    assert record.to_json()["payload"]["workload"] == {"name": "mine"}


def test_history_finds_an_id_in_any_registered_section(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "canary.db") as store:
        run_id = store.create_run({"sections": ["stack"]})
        change = SectionResult("stack", "tests/t.py::test_a", "both", "newly-failing", {})
        store.save_section_result(run_id, change)
        assert find_section(store, "tests/t.py::test_a") == "stack"


def test_a_policy_word_a_key_does_not_allow_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text('[policy]\nfail_on_claims = ["regressed", "typo"]\n')
    result = run_canary_here("run", "--only", "claims", "--policy", "policy.toml", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("torchcanary:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "'fail_on_claims'" in lines[0] and "'typo'" in lines[0]
    assert "'regressed'" in lines[0] and "'new in candidate'" in lines[0]
    assert not (tmp_path / "canary-results").exists()  # no run was started


# drills --------------------------------------------------------------------------------
def _drill_block(text: str, start: str, end: str) -> str:
    """The drill section's part of a rendered file, from ``start`` to ``end`` inclusive."""
    first = text.index(start)
    return text[first : text.index(end, first) + len(end)]


@pytest.fixture(scope="module")
def drills_rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The drill run stored before the drill records, reported again by today's code."""
    work = tmp_path_factory.mktemp("drill-records")
    shutil.copy(STORED / "before-drill-records.db", work / "canary.db")
    result = run_canary_here(
        "report", DRILL_RUN_ID, "--store", "canary.db", "--output", "out", cwd=work
    )
    assert result.returncode == 0, result.stderr
    return work / "out" / DRILL_RUN_ID


def test_a_drill_run_stored_before_the_records_renders_to_the_byte_as_it_did(
    drills_rendered: Path,
) -> None:
    def read(name: str) -> tuple[str, str]:
        return (
            (STORED / f"before-drill-records.{name}").read_text(),
            (drills_rendered / name).read_text(),
        )

    before, now = read("report.html")
    html = ('<section class="drills">', "</section>")
    assert _drill_block(now, *html) == _drill_block(before, *html)
    before, now = read("summary.md")
    markdown = ("## Fault drills", "Details: the HTML report.")
    assert _drill_block(now, *markdown) == _drill_block(before, *markdown)
    before, now = read("junit.xml")
    assert re.findall(r"<testcase.*?</testcase>", now, re.S) == re.findall(
        r"<testcase.*?</testcase>", before, re.S
    )
    # results.json: each drill row is its stored text, its schema version added at the end
    before_json = json.loads(read("results.json")[0])
    now_json = json.loads(read("results.json")[1])
    rows = now_json["sections"]["drill"]
    assert {row["payload"].pop(RECORD_SCHEMA_KEY) for row in rows} == {1}
    assert json.dumps(rows, indent=2) == json.dumps(before_json["sections"]["drill"], indent=2)
    assert now_json["decision_detail"] == before_json["decision_detail"]


def test_the_drill_decision_read_from_the_records_is_the_one_the_old_code_made(
    tmp_path: Path,
) -> None:
    shutil.copy(STORED / "before-drill-records.db", tmp_path / "canary.db")
    with SqliteStore(tmp_path / "canary.db") as store:
        view = load_run_view(store, DRILL_RUN_ID)
    plan = view.run.plan
    decision = decide(view, plan["policy"], tuple(plan["sections"]), {})
    assert decision.label == view.run.decision == "go"
    # Under a strict policy the candidate's slower restart blocks, in the old code's words
    # (the stored run re-judged at commit 9a42da8, before the records).
    strict = {
        "drill_max_slowdown": 1.5,
        "drill_slowdown_floor_s": 2.0,
        "drill_block_on_flight_recorder": True,
        "drill_loss_rtol": 0.0,
    }
    assert drill_section.blocking_reasons(view, strict) == [
        "drill kill:restart-unshared: resume_s 15.3 s in the candidate against 8.2 s in the "
        "baseline"
    ]


def test_a_drill_row_keeps_unknown_facts_and_stored_nulls_and_refuses_a_strange_verdict() -> None:
    row = {
        "key": "kill:restart",
        "env_role": "candidate",
        "verdict": "failed",
        "payload": {"newer_fact": [1, 2], "reason": None, "detect_s": 1.5, "step_diffs": []},
    }
    record = get_section("drill").record_from_json(row)
    assert isinstance(record, DrillRun) and record.verdict is DrillVerdict.FAILED
    assert record.detect_s == 1.5 and record.step_diffs == () and record.reason is None
    assert record.reason_text == "None"  # as the reports always showed a null reason
    written = record.to_json()
    assert written["payload"].pop(RECORD_SCHEMA_KEY) == 1
    assert json.dumps(written) == json.dumps(row)
    with pytest.raises(ValueError, match="'passing' is not a valid DrillVerdict"):
        get_section("drill").record_from_json({**row, "verdict": "passing"})


def test_the_drill_section_stores_each_row_as_its_versioned_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip`: a network drill is not checkable here
    settings = drill_section.parse_settings({"faults": ["net-slow:none"]})
    with SqliteStore(tmp_path / "canary.db") as store:
        plan = RunPlan("b", "c", sections=("drill",), settings={"drill": settings})
        run_id = store.create_run(plan.to_json())
        env = Environment(
            "baseline",
            parse_env_spec("torch==2.13.0"),
            "/nonexistent/python",
            str(tmp_path),
            "2.13.0",
            True,
            0.0,
        )
        ctx = RunContext(
            run_id,
            store,
            plan,
            {"baseline": env, "candidate": env},
            tmp_path,
            tmp_path / "work",
            Progress(quiet=True),
        )
        drill_section.run(ctx)
        rows = store.section_results(run_id, "drill")
    assert [(r.key, r.env_role, r.verdict) for r in rows] == [
        ("net-slow:none", "baseline", "not-checkable"),
        ("net-slow:none", "candidate", "not-checkable"),
    ]
    assert all(row.payload[RECORD_SCHEMA_KEY] == DRILL_SCHEMA_VERSION for row in rows)
    assert "'ip' command" in rows[0].payload["reason"]


# claims --------------------------------------------------------------------------------
# Two claims runs and a fleet run built from the first, stored before the claims' reading
# moved out of report/view.py (see fixtures/records/README.md).
CLAIMS_RUN_ID, CLAIMS_RERUN_ID = "20261204-051720-0e4b66", "20261204-051924-cdfc63"
CLAIMS_FLEET_RUN_ID = "20261204-051903-0d395a"
REPORT_FILES = ("report.html", "results.json", "junit.xml", "summary.md")


def _reported(work: Path, db: str, run_id: str) -> Path:
    shutil.copy(STORED / db, work / "canary.db")
    result = run_canary_here("report", run_id, "--store", "canary.db", "--output", "out", cwd=work)
    assert result.returncode == 0, result.stderr
    return work / "out" / run_id


def _summary_printed(db: Path, run_id: str, fleet: bool) -> str:
    """What a run prints when it ends, on a 100-column console without colour."""
    from torchcanary.commands import summary

    console = Console(width=100, color_system=None, force_terminal=False, file=io.StringIO())
    with SqliteStore(db) as store:
        (summary.print_fleet_summary if fleet else summary.print_summary)(console, store, run_id)
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize(
    ("stem", "run_id", "fleet"),
    [
        ("before-claims-view", CLAIMS_RUN_ID, False),
        ("before-claims-fleet", CLAIMS_FLEET_RUN_ID, True),
    ],
)
def test_a_claims_run_stored_before_the_claims_view_moved_renders_to_the_byte_as_it_did(
    tmp_path: Path, stem: str, run_id: str, fleet: bool
) -> None:
    rendered = _reported(tmp_path, f"{stem}.db", run_id)
    for name in REPORT_FILES:
        now, before = (rendered / name).read_text(), (STORED / f"{stem}.{name}").read_text()
        now = _without_newer_sections(_without_evidence(now))
        assert _without_style(now) == _without_style(before), name
    printed = _summary_printed(tmp_path / "canary.db", run_id, fleet)
    assert printed == (STORED / f"{stem}.terminal.txt").read_text()


def _without_evidence(text: str) -> str:
    """An output without what issue 33 added after these were written: results.json's
    last entry ``evidence`` and summary.md's last line (the digest to cite)."""
    text = re.sub(r',\n  "evidence": \{.*\}\n\}$', "\n}", text, count=1, flags=re.S)
    return re.sub(r"\nEvidence: run \S+, digest sha256:[0-9a-f]{64} .*\n$", "", text, count=1)


def _without_newer_sections(text: str) -> str:
    """Without the empty entries of sections registered after the run was stored, and the
    fleet ledger's fields issue 30 added (empty for a run stored before it)."""
    text = re.sub(r',\n\s*"(explain|calls)": \[\]', "", text)
    return re.sub(r',\n\s*"noticed_s": null,\n\s*"devices": \{\}', "", text)


def _without_style(page: str) -> str:
    """The page without its style sheet: the layout changes, the records' reading must not."""
    return re.sub(r"<style>.*?</style>", "<style></style>", page, count=1, flags=re.S)


def test_compare_and_history_of_stored_claims_runs_print_as_they_did(tmp_path: Path) -> None:
    shutil.copy(STORED / "before-claims-view.db", tmp_path / "canary.db")
    runs = (CLAIMS_RUN_ID, CLAIMS_RERUN_ID)
    for args, stored in (
        (("compare", *runs), "compare.txt"),
        (("compare", "--json", *runs), "compare.json"),
        (("history", "--json", "sanity.numerics-vs-float64"), "history.json"),
    ):
        result = run_canary_here(*args, "--store", "canary.db", cwd=tmp_path, COLUMNS="80")
        assert result.returncode == 0, result.stderr
        assert result.stdout == (STORED / f"before-claims-view.{stored}").read_text(), args


def test_the_claims_decision_read_through_the_view_is_the_one_the_old_code_made(
    tmp_path: Path,
) -> None:
    for db in ("before-claims-view.db", "before-claims-fleet.db"):
        shutil.copy(STORED / db, tmp_path / db)
    with SqliteStore(tmp_path / "before-claims-view.db") as store:
        view = load_run_view(store, CLAIMS_RUN_ID)
    plan = view.run.plan
    decision = decide(view, plan["policy"], tuple(plan["sections"]), {})
    assert decision.label == view.run.decision == "go" and decision.reasons == ()
    # Under a policy that blocks on more comparisons, the old code's words (commit 9dc058c).
    strict = {"fail_on_claims": ["not reproduced", "unverified here"]}
    assert get_section("claims").blocking_reasons(view, strict) == [
        "claim control-flow.torch-switch not reproduced: baseline absent, candidate absent "
        "(torch.switch does not exist (an internal torch._higher_order_ops.switch does; "
        "see evidence))",
        "claim control-flow.while-loop-cudagraph unverified here: baseline "
        "not-checkable-here, candidate not-checkable-here (not checked: CUDA-graph capture "
        "needs a CUDA GPU; while_loop correctness on CPU shown as information)",
    ]
    # The constructed fleet record names no hardware to fit the plan to, so each profile is
    # held to the whole plan: cpu-b never ran the CUDA-graph claim, a unit left unchecked
    # (issue 38), shown as a warning here so the claims' own reasons stand alone.
    with SqliteStore(tmp_path / "before-claims-fleet.db") as store:
        fleet_plan = load_plan(store.run(CLAIMS_FLEET_RUN_ID).plan)
        relaxed = {**fleet_plan.policy, "block_on_not_run": False}
        fleet_plan = dataclasses.replace(fleet_plan, policy=relaxed)
        fleet_decision = fleet_decide(store, CLAIMS_FLEET_RUN_ID, fleet_plan, {})
    assert fleet_decision.not_checked == 2
    assert "control-flow.while-loop-cudagraph (candidate)" in fleet_decision.warnings[0]
    assert fleet_decision.reasons == (
        "[cpu-b] claim sanity.numerics-vs-float64 regressed: baseline confirmed, candidate "
        "refuted (constructed: refuted on cpu-b)",
        "[cpu-b] binary sanity sanity.numerics-vs-float64 refuted in the candidate: "
        "constructed: refuted on cpu-b",
    )


def test_a_bench_row_across_nodes_keeps_its_node_count_and_a_row_from_one_machine_has_none() -> (
    None
):
    bench = get_section("bench")
    for verdict, kind in (("same", BenchMeasured), ("skipped", BenchSkipped)):
        row = {"key": "collective/x", "env_role": "both", "verdict": verdict, "payload": {}}
        here = bench.record_from_json(row)
        across = bench.record_from_json({**row, "payload": {"nodes": 2}})
        assert isinstance(here, kind) and here.nodes is None
        assert "nodes" not in here.to_json()["payload"]  # rows of one machine unchanged
        assert isinstance(across, kind) and across.nodes == 2
        assert across.to_json()["payload"]["nodes"] == 2
