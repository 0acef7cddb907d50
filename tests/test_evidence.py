"""The evidence digest (report/evidence.py) and ``torchcanary verify``: the documented
canonical form, the parts a mismatch names, and the command's exit codes. A real run
that records and verifies its digest end to end is in tests/test_ci_templates.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cli_helpers import run_canary_here
from torchcanary.report.evidence import differences, evidence_of, evidence_parts
from torchcanary.report.render import with_evidence

RESULTS = {
    "schema_version": 1,
    "run": {"run_id": "R1", "plan": {"baseline": "a", "policy": {"max_slowdown": 0.05}}},
    "decision": "go",
    "environments": {"baseline": {"torch_version": "2.13.0"}, "candidate": {"torch": "é"}},
    "sections": {"bench": [{"key": "mm", "payload": {"ratio": 1.5}}], "drill": []},
    "packs": [{"release": "2.14"}],
}


def test_the_parts_and_digest_follow_the_documented_canonical_form():
    evidence = evidence_of(RESULTS)
    assert sorted(evidence.files) == [
        "decision",
        "environment.baseline",
        "environment.candidate",
        "packs",
        "policy",
        "results.bench",
        "results.drill",
        "run",
        "schema_version",
    ]
    # Recomputed here by the recipe in docs/json-schema.md, not by the module's helpers.
    canon = json.dumps({"max_slowdown": 0.05}, sort_keys=True, separators=(",", ":"))
    assert evidence.files["policy"] == hashlib.sha256(canon.encode()).hexdigest()
    listing = "".join(f"{n} {evidence.files[n]}\n" for n in sorted(evidence.files))
    assert evidence.digest == "sha256:" + hashlib.sha256(listing.encode()).hexdigest()
    assert evidence_parts(RESULTS)["run"]["plan"] == {"baseline": "a"}  # policy is its own part
    reordered = json.loads(json.dumps(RESULTS, indent=4))
    reordered["run"] = {"plan": reordered["run"]["plan"], "run_id": "R1"}
    assert evidence_of(reordered) == evidence  # key order and layout do not count


def test_a_changed_part_is_named_and_a_written_file_checks_against_itself(tmp_path: Path):
    text, evidence = with_evidence(RESULTS)
    assert json.loads(text)["evidence"] == evidence.to_json()
    changed = json.loads(text)
    changed["sections"]["bench"][0]["payload"]["ratio"] = 1.25
    found = differences(evidence, evidence_of(changed))
    assert len(found) == 1 and found[0].startswith("results.bench: differs")

    run_dir = tmp_path / "R1"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(text)
    ok = run_canary_here("verify", str(run_dir), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"match: run R1, digest {evidence.digest}" in ok.stdout
    (run_dir / "results.json").write_text(json.dumps(changed))
    bad = run_canary_here("verify", str(run_dir), cwd=tmp_path)
    assert bad.returncode == 1 and "results.bench: differs" in bad.stdout, bad.stdout
    missing = run_canary_here("verify", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "no results.json at" in missing.stderr
