"""A fleet run's reports from a real store: benchmarks side by side per profile, each
profile's own section, and a lost unit named in every format."""

from __future__ import annotations

import json
from pathlib import Path

from torchcanary.report.render import write_outputs
from torchcanary.report.view import FLEET_ARTIFACT, load_run_view
from torchcanary.report_kit.ledger import LEDGER_SECTION
from torchcanary.store.location import open_store
from torchcanary.store.rows import SectionResult

PROFILES = {"h100-box": ("node-a", 1.31), "l40s-box": ("node-b", 0.97)}


def test_benchmarks_sit_side_by_side_per_profile_and_a_lost_unit_is_named(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "canary.db")) as store:
        run_id = store.create_run({"baseline": "b", "candidate": "c", "sections": ["bench"]})
        nodes = [
            {"key": p, "node_id": node, "profile": {"gpu_count": 8}}
            for p, (node, _) in PROFILES.items()
        ]
        store.save_artifact(
            run_id, FLEET_ARTIFACT, "application/json", json.dumps({"nodes": nodes}).encode()
        )
        for profile, (node, ratio) in PROFILES.items():
            scoped = store.scoped(node, profile)
            verdict = "slower" if ratio > 1 else "same"
            payload = {"ratio": ratio, "ci_low": ratio - 0.01, "ci_high": ratio + 0.01}
            scoped.save_section_result(
                run_id, SectionResult("bench", "gemm/4096", "both", verdict, payload)
            )
        lost = {"error": "node node-b went away", "noticed_s": 12.3, "not_asked": {}}
        store.scoped("node-b", "l40s-box").save_section_result(
            run_id, SectionResult(LEDGER_SECTION, "bench", "both", "lost", lost)
        )
        store.scoped("node-a", "h100-box").save_section_result(
            run_id, SectionResult(LEDGER_SECTION, "bench", "both", "ok", {"error": None})
        )
        store.finish_run(run_id, "no-go", {"reasons": ["[h100-box] gemm/4096 slower"]})
        view = load_run_view(store, run_id)
    assert set(view.profiles) == set(PROFILES)
    outputs = write_outputs(view, tmp_path / "out")
    markdown = outputs["markdown"].read_text()
    assert "| `gemm/4096` | slower 1.310 | same 0.970 |" in markdown
    assert "- bench on `l40s-box`: lost (noticed after 12.3 s): node node-b went away" in markdown
    fleet = json.loads(outputs["json"].read_text())["fleet"]
    assert fleet["sections_matrix"]["bench"]["gemm/4096"] == {
        "h100-box": "slower 1.310",
        "l40s-box": "same 0.970",
    }
    assert {(u["profile"], u["status"], u["noticed_s"]) for u in fleet["units"]} == {
        ("h100-box", "ok", None),
        ("l40s-box", "lost", 12.3),
    }
    html = outputs["html"].read_text()
    assert 'id="bench-matrix"' in html and "Profile h100-box" in html
    assert "bench: lost (noticed after 12.3 s) (node node-b went away)" in html
    junit = outputs["junit"].read_text()
    assert 'classname="fleet [l40s-box]" name="bench"' in junit
