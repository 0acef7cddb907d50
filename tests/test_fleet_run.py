"""`torchcanary run --fleet`: a real run across real Ray nodes, into the store and reports.

The session's local cluster (conftest.py) gets two more nodes here, standing for two
hardware profiles: ``feature-box`` has the feature the ``canary_fleet`` probes look for,
``plain-box`` lacks it. One run qualifies on both; ``plain-box`` is killed while its
probes run, and ``--resume`` on a fresh ``plain-box`` node finishes the run. Every check
below reads that one run, so the whole story costs one run and one resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from cli_helpers import canary_command, canary_env, run_canary
from fleet_helpers import fleet_run_args, probe_rows, stored_rows
from local_cluster import local_node_args, node_pids, wait_gone

pytestmark = [pytest.mark.ray, pytest.mark.torch_envs]


@pytest.fixture(scope="module")
def fleet_run(ray_cluster, tmp_path_factory) -> dict[str, Any]:
    """A run on feature-box and plain-box; plain-box dies mid-run; then --resume."""
    work = tmp_path_factory.mktemp("fleet-run")
    db, output = work / "canary.db", work / "out"
    feature = ray_cluster.add_node(
        **local_node_args(
            "feature-box",
            env_vars={"CANARY_TEST_FEATURE": "1", "CANARY_TEST_SLOW_S": "1"},
        )
    )
    doomed = ray_cluster.add_node(
        **local_node_args("plain-box", env_vars={"CANARY_TEST_SLOW_S": "60"})
    )
    ray_cluster.wait_for_nodes()
    fresh = None
    try:
        select = ["--fleet-select", "key=feature-box", "--fleet-select", "key=plain-box"]
        first = subprocess.Popen(
            canary_command(*fleet_run_args(db, output, "--fleet", ray_cluster.address, *select)),
            cwd=work,
            env=canary_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Kill plain-box once it has stored a result: its slow probe is then running.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if any(key[0] == "plain-box" for key in probe_rows(db)):
                break
            time.sleep(0.2)
        doomed_pids = node_pids(doomed)
        ray_cluster.remove_node(doomed, allow_graceful=False)
        out, err = first.communicate(timeout=300)
        before = probe_rows(db)
        ledger_before = stored_rows(
            db, "SELECT profile, key, verdict, payload_json FROM section_results"
        )
        [run_dir] = [p for p in output.iterdir() if p.name != "latest"]
        units_before = json.loads((run_dir / "results.json").read_text())["fleet"]["units"]
        summary_before = (run_dir / "summary.md").read_text()  # --resume rewrites both
        assert wait_gone(doomed_pids) == []
        # A new machine of the same profile joins; --resume finds the run's fleet itself.
        fresh = ray_cluster.add_node(
            **local_node_args("plain-box", env_vars={"CANARY_TEST_SLOW_S": "1"})
        )
        ray_cluster.wait_for_nodes()
        resumed = run_canary(*fleet_run_args(db, output, "--resume"), cwd=work, timeout=400)
        yield {
            "db": db,
            "output": output,
            "first": (first.returncode, out, err),
            "before": before,
            "ledger_before": ledger_before,
            "units_before": units_before,
            "summary_before": summary_before,
            "resumed": resumed,
            "after": probe_rows(db),
            "doomed_id": doomed.node_id,
            "fresh_id": fresh.node_id,
            "feature_id": feature.node_id,
        }
    finally:
        for node in (feature, fresh):
            if node is not None:
                ray_cluster.remove_node(node)


def test_each_profile_runs_on_its_own_node_and_every_result_is_stored_with_node_and_profile(
    fleet_run,
) -> None:
    after = fleet_run["after"]
    assert set(after) == {
        (profile, role, probe)
        for profile in ("feature-box", "plain-box")
        for role in ("baseline", "candidate")
        for probe in ("fleet.feature", "fleet.slow")
    }
    for (profile, _role, _probe), (node, _started, _verdict) in after.items():
        if profile == "feature-box":
            assert node == fleet_run["feature_id"]
        else:
            assert node in (fleet_run["doomed_id"], fleet_run["fresh_id"])
    # A node without a GPU is never asked about a CUDA claim (no result, not even skipped).
    assert not any(probe == "fleet.needs-cuda" for _, _, probe in after)
    # The probe ran on its node: the verdict follows the node's hardware.
    assert after[("feature-box", "candidate", "fleet.feature")][2] == "confirmed"
    assert after[("plain-box", "candidate", "fleet.feature")][2] == "refuted"
    manifests = stored_rows(fleet_run["db"], "SELECT profile, role FROM environments")
    assert sorted(manifests) == [
        ("feature-box", "baseline"),
        ("feature-box", "candidate"),
        ("plain-box", "baseline"),
        ("plain-box", "candidate"),
    ]


def test_a_node_killed_mid_run_has_its_unfinished_work_recorded_lost_and_the_run_goes_on(
    fleet_run,
) -> None:
    code, out, err = fleet_run["first"]
    assert code == 3, err[-3000:]
    ledger = {(p, key): verdict for p, key, verdict, _ in fleet_run["ledger_before"]}
    assert ledger == {("feature-box", "claims"): "ok", ("plain-box", "claims"): "lost"}
    assert "claims@plain-box: lost on node" in err + out
    # How long Ray took to notice: from the unit's last piece to the node table's word.
    ledger_rows = fleet_run["ledger_before"]
    [noticed] = [json.loads(js)["noticed_s"] for p, _, _, js in ledger_rows if p == "plain-box"]
    assert 0 < noticed < 120
    units = {(u["profile"], u["status"], u["noticed_s"]) for u in fleet_run["units_before"]}
    assert units == {("feature-box", "ok", None), ("plain-box", "lost", noticed)}
    assert f"lost (noticed after {noticed:.1f} s)" in fleet_run["summary_before"]
    before = fleet_run["before"]
    # feature-box finished everything; plain-box kept what it had finished before it died.
    assert sum(key[0] == "feature-box" for key in before) == 4
    assert 1 <= sum(key[0] == "plain-box" for key in before) < 4


def test_resume_sends_again_only_what_the_dead_node_had_not_finished(fleet_run) -> None:
    resumed = fleet_run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    before, after = fleet_run["before"], fleet_run["after"]
    for key, (node, started, verdict) in before.items():
        assert after[key] == (node, started, verdict), f"{key} was run again"
    redone = {key for key in after if key not in before}
    assert redone and all(key[0] == "plain-box" for key in redone)
    assert all(after[key][0] == fleet_run["fresh_id"] for key in redone)
    ledger = stored_rows(fleet_run["db"], "SELECT profile, key, verdict FROM section_results")
    assert sorted(ledger) == [("feature-box", "claims", "ok"), ("plain-box", "claims", "ok")]


def test_the_reports_put_claims_in_a_matrix_of_claim_by_profile_led_by_split_verdicts(
    fleet_run,
) -> None:
    [run_dir] = [p for p in fleet_run["output"].iterdir() if p.name != "latest"]
    results = json.loads((run_dir / "results.json").read_text())
    fleet = results["fleet"]
    assert fleet["split_claims"] == ["fleet.feature"]
    first = fleet["claims_matrix"][0]
    assert first["probe_id"] == "fleet.feature" and first["split"]
    assert first["profiles"]["feature-box"]["candidate"] == "confirmed"
    assert first["profiles"]["plain-box"]["comparison"] == "not reproduced"
    assert {unit["status"] for unit in fleet["units"]} == {"ok"}
    cuda = next(row for row in fleet["claims_matrix"] if row["probe_id"] == "fleet.needs-cuda")
    for profile in ("feature-box", "plain-box"):
        assert cuda["profiles"][profile] == {
            "not_asked": f"needs cuda; {profile} has none",
            "not_checked": None,
        }
    assert set(fleet["profiles"]) == {"feature-box", "plain-box"}

    markdown = (run_dir / "summary.md").read_text()
    headline = "fleet.feature: confirmed on feature-box; refuted on plain-box"
    assert markdown.index(headline) < markdown.index("## Claims x profile")
    assert "| claim | feature-box | plain-box |" in markdown
    assert "not asked: needs cuda; plain-box has none" in markdown

    html = (run_dir / "report.html").read_text()
    assert html.index("Claims that depend on the hardware") < html.index("Claims x profile")
    assert "<th>feature-box</th><th>plain-box</th>" in html

    junit = (run_dir / "junit.xml").read_text()
    assert 'classname="claims.candidate [plain-box]" name="fleet.feature"' in junit
    assert 'classname="claims.candidate [feature-box]" name="fleet.feature"' in junit


def test_a_selection_no_node_matches_is_one_line_exit_2_and_starts_no_run(
    ray_cluster, tmp_path
) -> None:
    store = tmp_path / "canary.db"
    done = run_canary(
        *fleet_run_args(store, tmp_path / "out", "--fleet", ray_cluster.address),
        "--fleet-select",
        "key=no-such-box",
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = [text for text in done.stderr.splitlines() if text.startswith("torchcanary:")]
    assert line.startswith(
        "torchcanary: error: no node of the fleet matches --fleet-select; its profiles: "
    )
    assert "alpha-box" in line
    assert stored_rows(store, "SELECT run_id FROM runs") == []


def test_an_unreachable_fleet_is_one_line_exit_2_and_writes_nothing(tmp_path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = tmp_path / "canary.db"
    done = run_canary(
        *fleet_run_args(store, tmp_path / "out", "--fleet", f"ray://127.0.0.1:{port}"),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"torchcanary: error: cannot reach the Ray cluster at ray://127.0.0.1:{port} "
        "(Connection refused); check the address (HOST:PORT or ray://HEAD:10001) and that "
        "the Ray head node is up"
    ]
    assert not store.exists() and not (tmp_path / "out").exists()


def test_without_fleet_a_run_never_imports_ray(tmp_path) -> None:
    # A local run's path through `run` (here: a resume with nothing to resume) stays Ray-free.
    code = (
        "import sys\n"
        "from torchcanary.cli import main\n"
        f"code = main(['run', '--resume', '--store', {str(tmp_path / 'c.db')!r}])\n"
        "print(code, 'ray' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert "nothing to resume" in done.stderr
