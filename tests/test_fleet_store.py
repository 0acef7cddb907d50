"""The store's profile axis, on both engines: every result carries its node and profile.

A fleet run stores one result per hardware profile under the same keys; a run on one
machine stores node = profile = '' and reads exactly as before. ``history --profile``
narrows a claim's or benchmark's history to one profile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cli_helpers import run_canary_here
from store_helpers import fill_run
from torchcanary.claims.history import history
from torchcanary.claims.records import done_probe_keys, probe_results, save_probe_result
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.store.history import HistoryFilter
from torchcanary.store.location import is_postgres_url, open_store
from torchcanary.store.rows import SectionResult
from torchcanary.store.schema import MIGRATIONS

PROFILES = {"h100-box": "node-a", "mi300-box": "node-b"}


def _claim(run_id: str, role: str, verdict: str) -> ProbeResult:
    return ProbeResult(
        run_id, role, "inductor.fusion", Outcome(Verdict(verdict), verdict), 1.0, time.time()
    )


def _fleet_run(store) -> str:
    """A run whose claim the candidate confirms on h100-box and refutes on mi300-box."""
    run_id = store.create_run({"baseline": "b", "candidate": "c", "sections": ["claims"]})
    for (profile, node), verdict in zip(PROFILES.items(), ("confirmed", "refuted"), strict=True):
        scoped = store.scoped(node, profile)
        for role in ("baseline", "candidate"):
            save_probe_result(scoped, _claim(run_id, role, verdict))
        scoped.save_section_result(
            run_id, SectionResult("bench", "matmul", "both", "same", {"ratio": 1.0})
        )
    return run_id


def test_each_profile_keeps_its_own_result_under_the_same_keys(store_location) -> None:
    with open_store(store_location) as store:
        run_id = _fleet_run(store)
        for (profile, node), verdict in zip(
            PROFILES.items(), ("confirmed", "refuted"), strict=True
        ):
            scoped = store.scoped(node, profile)
            assert scoped.profile == profile
            assert [r.outcome.verdict.value for r in probe_results(scoped, run_id)] == [verdict] * 2
            assert done_probe_keys(scoped, run_id) == {
                ("baseline", "inductor.fusion"),
                ("candidate", "inductor.fusion"),
            }
            assert len(scoped.section_results(run_id, "bench")) == 1
        # The run itself (profile '') holds none of them: a local view is never mixed.
        assert probe_results(store, run_id) == []
        rows = store.query("SELECT node, profile FROM probe_results WHERE run_id = ?", (run_id,))
        assert sorted(set(rows)) == sorted((node, profile) for profile, node in PROFILES.items())
        assert store.run_profiles(run_id) == {"h100-box": "node-a", "mi300-box": "node-b"}


def test_history_narrows_to_one_profile_and_otherwise_has_an_entry_per_profile(
    store_location,
) -> None:
    with open_store(store_location) as store:
        _fleet_run(store)
        fill_run(store)  # a run on one machine: profile ''
        every = history(store, "inductor.fusion", HistoryFilter())
        assert sorted(entry.profile for entry in every) == ["", "h100-box", "mi300-box"]
        [h100] = history(store, "inductor.fusion", HistoryFilter(profile="h100-box"))
        assert (h100.profile, h100.verdict) == ("h100-box", "already in baseline")
        assert h100.label.endswith("on h100-box")
        [local] = history(store, "inductor.fusion", HistoryFilter(profile=""))
        assert local.profile == "" and local.baseline == "2.13.0"


def test_history_profile_flag_on_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "canary.db"
    with open_store(str(db)) as store:
        _fleet_run(store)
    done = run_canary_here(
        "history",
        "inductor.fusion",
        "--store",
        str(db),
        "--profile",
        "mi300-box",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    assert [(e["profile"], e["verdict"]) for e in entries] == [("mi300-box", "not reproduced")]


def test_results_stored_before_the_fleet_migrate_to_profile_empty(store_location) -> None:
    """A store at schema 3 with a run in it: its results read back unchanged, unscoped."""
    statements = [s for m in MIGRATIONS[:3] for s in m.split(";") if s.strip()]
    if is_postgres_url(store_location):
        from torchcanary.store.postgres import postgres_schema

        statements = [postgres_schema(s) for s in statements]
        statements += [
            "CREATE TABLE torchcanary_schema (version INTEGER NOT NULL)",
            "INSERT INTO torchcanary_schema VALUES (3)",
        ]
    else:
        statements.append("PRAGMA user_version = 3")
    statements += [
        "INSERT INTO runs (run_id, created_at, status, plan_json) "
        "VALUES ('old', 1700000000.0, 'finished', '{}')",
        "INSERT INTO probe_results VALUES "
        "('old', 'candidate', 'c10d.x', 'confirmed', 'held', '{}', 1.5, 1700000001.0)",
    ]
    _execute(store_location, statements)
    with open_store(store_location) as store:
        [result] = probe_results(store, "old")
        assert (result.probe_id, result.outcome.verdict, result.duration_s) == (
            "c10d.x",
            Verdict.CONFIRMED,
            1.5,
        )
        assert store.query("SELECT node, profile FROM probe_results") == [("", "")]


def _execute(location: str, statements: list[str]) -> None:
    if is_postgres_url(location):
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement)  # type: ignore[arg-type]
    else:
        import sqlite3

        Path(location).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(location) as connection:
            for statement in statements:
                connection.execute(statement)


def _profiled_run(store, verdicts: dict[str, str]) -> str:
    """A fleet run whose claim has ``verdicts[profile]`` on each of its profiles."""
    run_id = store.create_run({"baseline": "b", "candidate": "c", "sections": ["claims"]})
    for profile, verdict in verdicts.items():
        scoped = store.scoped(f"node-{profile}", profile)
        save_probe_result(scoped, _claim(run_id, "baseline", "confirmed"))
        save_probe_result(scoped, _claim(run_id, "candidate", verdict))
    return run_id


def test_compare_sets_each_profile_against_the_same_profile_and_names_a_lone_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "canary.db"
    with open_store(str(db)) as store:
        # h100-box changes; mi300-box is only in A, rtx-box only in B (with the verdict
        # mi300-box had, which a comparison across profiles would wrongly call unchanged).
        run_a = _profiled_run(store, {"h100-box": "confirmed", "mi300-box": "refuted"})
        run_b = _profiled_run(store, {"h100-box": "refuted", "rtx-box": "refuted"})
    compare = ["compare", run_a, run_b, "--store", str(db)]
    done = run_canary_here(*compare, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    changes = {(c["profile"], c["section"]): c for c in json.loads(done.stdout)["changes"]}
    assert sorted(changes) == [
        ("h100-box", "claims"),
        ("mi300-box", "fleet"),
        ("rtx-box", "fleet"),
    ]
    claim = changes[("h100-box", "claims")]
    assert claim["item"] == "inductor.fusion" and claim["before"] != claim["after"]
    assert (
        changes[("mi300-box", "fleet")]["before"],
        changes[("mi300-box", "fleet")]["after"],
    ) == (
        "results",
        "absent",
    )
    assert f"only run {run_b}" in changes[("rtx-box", "fleet")]["detail"]
    table = run_canary_here(*compare, cwd=tmp_path, COLUMNS="200")
    assert "profile" in table.stdout and "rtx-box" in table.stdout
