"""Coverage of the notes: every claim of a pack gets a status from its probes' verdicts."""

from __future__ import annotations

import json

from torchcanary.claims.records import save_probe_result
from torchcanary.packs.coverage import CoverageStatus, claim_coverage, coverage_lines
from torchcanary.probe_result import Outcome, ProbeResult, Verdict

PACK = {
    "name": "demo-9.9",
    "notes": {"file": "notes.md", "sha256": "x"},
    "claims": [
        {"id": "a", "quote": "A.", "probes": ["p.ok", "p.ok2"], "baseline_expected": "absent"},
        {"id": "b", "quote": "B.", "probes": ["p.ok", "p.no"], "baseline_expected": "absent"},
        {"id": "c", "quote": "C.", "probes": ["p.ok", "p.gpu"], "baseline_expected": "any"},
        {"id": "d", "quote": "D.", "probes": "unprobed", "needs": "a cluster"},
        {"id": "e", "quote": "E.", "probes": ["p.missing"]},
        {"id": "f", "quote": "F.", "probes": ["p.boom"]},
    ],
}


def _result(role: str, probe_id: str, verdict: Verdict) -> ProbeResult:
    return ProbeResult("run", role, probe_id, Outcome(verdict, f"{probe_id} said so", {}), 0.1, 0)


def _results() -> list[ProbeResult]:
    candidate = {
        "p.ok": Verdict.CONFIRMED,
        "p.ok2": Verdict.CONFIRMED,
        "p.no": Verdict.REFUTED,
        "p.gpu": Verdict.NOT_CHECKABLE,
        "p.boom": Verdict.CRASHED,
    }
    baseline = {"p.ok": Verdict.ABSENT, "p.ok2": Verdict.CONFIRMED}
    return [_result("candidate", p, v) for p, v in candidate.items()] + [
        _result("baseline", p, v) for p, v in baseline.items()
    ]


def test_every_claim_gets_a_row_and_its_status_follows_all_of_its_probes():
    rows = {row.claim_id: row for row in claim_coverage([PACK], _results())}
    assert [rows[c].status for c in "abcdef"] == [
        CoverageStatus.VERIFIED,
        CoverageStatus.REFUTED,
        CoverageStatus.NOT_CHECKABLE,
        CoverageStatus.UNPROBED,
        CoverageStatus.NOT_RUN,
        CoverageStatus.FAILED,
    ]
    assert "1 of 2 facets verified" in rows["c"].detail and "p.gpu said so" in rows["c"].detail
    assert "a cluster" in rows["d"].detail


def test_a_baseline_that_already_shows_a_new_claim_is_flagged():
    rows = {row.claim_id: row for row in claim_coverage([PACK], _results())}
    assert rows["a"].baseline_as_expected is False  # p.ok2 confirmed before the release
    assert rows["c"].baseline_as_expected is None  # "any": nothing expected


def test_the_coverage_line_counts_each_status_of_the_notes_claims():
    (line,) = coverage_lines([PACK], claim_coverage([PACK], _results()))
    assert line == (
        "demo-9.9: of 6 claims in the notes.md notes: 1 verified, 1 refuted, "
        "1 not checkable here, 1 probe failed, 1 not run, 1 unprobed"
    )


def _stored_claims_view(store, verdicts: dict[str, Verdict]):
    """A run whose claims section stored the sanity pack and these candidate verdicts."""
    from torchcanary.claims.view import CATALOG_ARTIFACT, PACKS_ARTIFACT
    from torchcanary.plan import RunPlan
    from torchcanary.report.view import load_run_view

    run_id = store.create_run(RunPlan("torch==2.13.0", "torch==2.14.1").to_json())
    packs = [{"name": "sanity", "release": "*", "claims": []}]
    catalog = {pid: {"id": pid, "pack": "sanity"} for pid in verdicts}
    for name, content in ((CATALOG_ARTIFACT, catalog), (PACKS_ARTIFACT, packs)):
        store.save_artifact(run_id, name, "application/json", json.dumps(content).encode())
    for pid, verdict in verdicts.items():
        for role in ("baseline", "candidate"):
            save_probe_result(
                store,
                ProbeResult(run_id, role, pid, Outcome(verdict, f"{pid} said so", {}), 0.1, 0),
            )
    return load_run_view(store, run_id)


def test_a_sanity_check_the_candidate_refutes_is_no_go_even_if_the_baseline_agrees(store):
    from torchcanary.claims.section import blocking_reasons

    view = _stored_claims_view(
        store, {"sanity.version-pin": Verdict.REFUTED, "sanity.gloo-init": Verdict.CONFIRMED}
    )
    (reason,) = blocking_reasons(view, {"fail_on_claims": ["regressed"], "fail_on_sanity": True})
    assert "sanity.version-pin" in reason and "said so" in reason
    assert blocking_reasons(view, {"fail_on_claims": ["regressed"], "fail_on_sanity": False}) == []
