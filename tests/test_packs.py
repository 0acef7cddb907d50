"""Release packs: found through the entry point, checked, run, and their notes covered.

A fixture pack is installed the way a third-party package would be (a site directory with
a ``dist-info/entry_points.txt`` naming the ``torchcanary.packs`` group), so these tests
exercise the same discovery a real pack goes through.
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path

import pytest

from cli_helpers import run_canary, run_canary_here
from torchcanary.packs.checklist import sentences
from torchcanary.packs.discovery import discover_packs

# The 2.14 release notes, as the built-in pack ships them (the same text as the release's).
SEED_NOTES = Path(str(files("torchcanary.packs.builtin.pytorch_2_14") / "notes.txt"))
BUILTIN_2_14 = Path(__file__).resolve().parents[1] / "src/torchcanary/packs/builtin/pytorch_2_14"

PROBES_MODULE = '''
"""Demo probes: one confirms on any machine, one needs a GPU."""
from torchcanary.probe import Needs, Probe, confirmed

def _always(ctx):
    """Claim: the demo feature exists (it always does)."""
    return confirmed("demo feature present")

PROBES = (
    Probe("demo.always", "the demo feature exists", "any", _always),
    Probe("demo.gpu", "the demo runs on GPUs", "CUDA", _always, needs=Needs(devices=("cuda",))),
)
'''
NOTES = (
    "Demo 9.9 ships the always feature.\n\nDemo 9.9 runs on GPUs.\n\nDemo 9.9 is twice as fast.\n"
)


def install_pack(
    site: Path,
    name: str = "canary_pack_demo",
    release: str = "9.9",
    probes: tuple[str, str, str] = ("demo.always", "demo.gpu", ""),
    claim_ids: tuple[str, str, str] = ("9.9-01", "9.9-02", "9.9-03"),
    cited_sha256: str | None = None,
) -> None:
    """A pack package plus the dist-info that registers it in ``torchcanary.packs``."""
    package = site / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A demo release pack."""\n')
    (package / "probes.py").write_text(PROBES_MODULE)
    (package / "notes.txt").write_text(NOTES)
    quotes = [line for line in NOTES.splitlines() if line]
    pack = {
        "schema": 1,
        "name": f"demo-{release}",
        "release": release,
        "title": "Demo",
        "notes": {
            "file": "notes.txt",
            "sha256": cited_sha256 or hashlib.sha256(NOTES.encode()).hexdigest(),
        },
        "claims": [
            {
                "id": claim_id,
                "quote": quote,
                "topic": "demo",
                "baseline_expected": "any",
                "probes": [probe] if probe else "unprobed",
            }
            for claim_id, quote, probe in zip(claim_ids, quotes, probes, strict=True)
        ],
    }
    (package / "pack.json").write_text(json.dumps(pack))
    dist_info = site / f"{name}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[torchcanary.packs]\ndemo = {name}\n")


def _one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_builtin_2_14_pack_quotes_its_own_notes_and_cites_their_checksum():
    (pack,) = [i.pack for i in discover_packs() if i.pack.release == "2.14"]
    notes = BUILTIN_2_14 / "notes.txt"
    assert pack.notes_sha256 == hashlib.sha256(notes.read_bytes()).hexdigest()
    text = " ".join(notes.read_text().split())
    assert all(claim.quote in text for claim in pack.claims)
    assert len({claim.id for claim in pack.claims}) == len(pack.claims)


def test_checklist_turns_the_2_14_notes_into_claims_that_map_onto_the_builtin_probes(tmp_path):
    result = run_canary_here(
        "claims",
        "checklist",
        str(SEED_NOTES),
        "--release",
        "2.14",
        "--output",
        "d.json",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    draft = json.loads((tmp_path / "d.json").read_text())
    (builtin,) = [i for i in discover_packs() if i.pack.release == "2.14"]
    drafted_probes = {p for c in draft["claims"] if c["probes"] != "unprobed" for p in c["probes"]}
    assert drafted_probes == set(builtin.probes)
    # Every claim sentence of the notes is in the draft, and the built-in pack has each.
    claim_sentences = [s.text for s in sentences(SEED_NOTES.read_text()) if s.claim]
    assert [c["quote"] for c in draft["claims"]] == claim_sentences
    assert [c.quote for c in builtin.pack.claims] == claim_sentences
    assert draft["notes"]["sha256"] == hashlib.sha256(SEED_NOTES.read_bytes()).hexdigest()


def test_checklist_keeps_commentary_out_and_marks_unmatched_claims_unprobed(tmp_path):
    notes = tmp_path / "NOTES.md"
    notes.write_text(
        "# Release 2.15\n\n- torch.fancy is new. It works on CPU.\n\n## Our take\n\nUpgrade now.\n"
    )
    result = run_canary_here("claims", "checklist", str(notes), "--release", "2.15", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    draft = json.loads((tmp_path / "pack-2.15.json").read_text())
    assert [c["quote"] for c in draft["claims"]] == ["torch.fancy is new.", "It works on CPU."]
    assert all(c["probes"] == "unprobed" for c in draft["claims"])


def test_packs_command_lists_builtin_and_installed_packs(tmp_path):
    site = tmp_path / "site"
    install_pack(site)
    result = run_canary("packs", "--json", cwd=tmp_path, PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    assert {"sanity", "pytorch-2.14", "demo-9.9"} <= set(listed)
    assert listed["demo-9.9"]["claims"] == 3 and listed["demo-9.9"]["unprobed"] == 1


@pytest.mark.parametrize(
    ("kind", "install", "message"),
    [
        ("missing probe", {"probes": ("demo.always", "demo.nowhere", "")}, "demo.nowhere"),
        ("duplicate id", {"claim_ids": ("9.9-01", "9.9-01", "9.9-03")}, "appears twice"),
        ("checksum", {"cited_sha256": "0" * 64}, "sha256"),
    ],
)
def test_a_bad_pack_is_one_clear_line(tmp_path, kind, install, message):
    site = tmp_path / "site"
    install_pack(site, **install)
    result = run_canary("run", "--only", "claims", cwd=tmp_path, PYTHONPATH=str(site))
    line = _one_line_error(result)
    assert message in line and "canary_pack_demo" in line + "demo-9.9", (kind, line)


def test_a_pack_for_another_release_than_the_candidate_is_one_clear_line(tmp_path):
    result = run_canary_here(
        "run",
        "--only",
        "claims",
        "--release",
        "2.13",
        "--candidate",
        "torch==2.14.1 numpy",
        cwd=tmp_path,
    )
    line = _one_line_error(result)
    assert "2.13" in line and "2.14.1" in line and "--regression" in line


@pytest.mark.torch_envs
def test_installed_pack_runs_as_a_regression_check_and_its_notes_are_covered(
    tmp_path, baseline_env, candidate_env
):
    site = tmp_path / "site"
    install_pack(site)
    result = run_canary(
        "run",
        "--only",
        "claims",
        "--regression",
        "9.9",
        "--probes",
        "demo.*",
        "--quiet",
        cwd=tmp_path,
        PYTHONPATH=str(site),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads((tmp_path / "canary-results" / "latest" / "results.json").read_text())
    claims = {c["probe_id"]: c for c in report["claims"]}
    assert claims["demo.always"]["description"]["pack"] == "demo-9.9"
    assert claims["demo.always"]["candidate"]["outcome"]["verdict"] == "confirmed"
    coverage = {(row["pack"], row["claim_id"]): row for row in report["coverage"]}
    assert coverage["demo-9.9", "9.9-01"]["status"] == "verified"
    assert coverage["demo-9.9", "9.9-02"]["status"] == "not checkable here"
    assert "needs cuda" in coverage["demo-9.9", "9.9-02"]["detail"]
    assert coverage["demo-9.9", "9.9-03"]["status"] == "unprobed"
    # The candidate's own pack is chosen by default: every claim sentence of its notes has a row.
    quotes = [row["quote"] for row in report["coverage"] if row["pack"] == "pytorch-2.14"]
    assert quotes == [
        s.text for s in sentences((BUILTIN_2_14 / "notes.txt").read_text()) if s.claim
    ]
    assert len(quotes) == 16
    assert "demo-9.9: of 3 claims in the notes.txt notes: 1 verified" in result.stdout


@pytest.mark.torch_envs
def test_the_2_13_pack_answers_whether_its_claims_still_hold_in_the_candidate(
    tmp_path, baseline_env, candidate_env
):
    result = run_canary(
        "run",
        "--only",
        "claims",
        "--regression",
        "2.13",
        "--probes",
        "ddp.*",
        "--quiet",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads((tmp_path / "canary-results" / "latest" / "results.json").read_text())
    rows = [row for row in report["coverage"] if row["pack"] == "pytorch-2.13"]
    assert [row["claim_id"] for row in rows] == ["2.13-01", "2.13-02"]
    assert all(row["status"] == "verified" for row in rows), rows
    assert all(row["baseline_as_expected"] is True for row in rows), rows
