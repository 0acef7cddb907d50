"""The surface diff between the real torch 2.13.0 and 2.14.1 builds, end to end.

Each environment's worker collects its own surface; the tests pin changes that really
happened between the two releases, check the seed notes announce only what they name, and
run ``torchcanary diff`` on the fixture project as a user would.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary
from torchcanary.diff import section
from torchcanary.diff.assess import assess, in_use
from torchcanary.diff.changes import ChangeKind
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.release_text import ReleaseText
from torchcanary.worker.calls import COLLECT_SURFACE

pytestmark = pytest.mark.torch_envs

PROJECT = FIXTURES / "surface_project"
# The 2.14 release notes, as the built-in pack ships them (the same text as the release's).
SEED_NOTES = Path(str(files("torchcanary.packs.builtin.pytorch_2_14") / "notes.txt"))


@pytest.fixture(scope="module")
def surfaces(baseline_env, candidate_env, import_root) -> dict[str, dict]:
    def collect(env) -> dict:
        worker = WorkerProcess(env.python, import_root)
        try:
            call = worker.call(COLLECT_SURFACE, {}, timeout_s=600)
        finally:
            worker.close()
        assert call.ok, call.error + call.traceback
        return call.value

    with ThreadPoolExecutor(2) as pool:
        baseline, candidate = pool.map(collect, (baseline_env, candidate_env))
    return {"baseline": baseline, "candidate": candidate}


def test_collection_reads_config_modules_nested_keys_backend_flags_and_getters(surfaces):
    config = surfaces["baseline"]["config"]
    for module in (
        "torch._inductor.config",
        "torch._dynamo.config",
        "torch._functorch.config",
        "torch.distributed.config",
        "torch.compiler.config",
        "torch._inductor.config_comms",
        "torch.fx.config",
    ):
        assert config.get(module), module
    assert config["torch._inductor.config"]["triton.cudagraph_trees"] is True  # a nested key
    assert config["torch.backends"]["torch.backends.cudnn.enabled"] is True
    assert "torch.backends.cuda.matmul.allow_tf32" in config["torch.backends"]
    assert config["torch"]["torch.get_default_dtype()"] == "torch.float32"
    assert surfaces["baseline"]["import_failures"] == {}


def test_collection_reads_api_signatures_env_vars_and_library_versions(surfaces):
    api = surfaces["baseline"]["api"]
    assert set(api) >= {"torch", "torch.nn.functional", "torch.linalg", "torch.Tensor"}
    linear = api["torch.nn"]["Linear"]
    assert linear["kind"] == "class"
    assert ["bias", "positional-or-keyword", True, True] in linear["signature"]
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in surfaces["baseline"]["env_vars"]
    assert surfaces["candidate"]["build"]["library.nccl"].startswith("2.")
    assert surfaces["candidate"]["build"]["requires.triton"]


def test_collection_holds_no_addresses_or_paths_of_its_environment(surfaces, baseline_env):
    text = json.dumps(surfaces["baseline"])
    assert not re.search(r" at 0x[0-9a-f]+", text)
    assert str(Path(baseline_env.python).parent.parent) not in text


def test_changes_that_really_happened_between_2_13_0_and_2_14_1_are_found(surfaces):
    changes = assess(surfaces["baseline"], surfaces["candidate"], ReleaseText(frozenset()), None)
    found = {(c.kind, c.symbol): c for c in changes.changes}
    lambda_guard = found[
        (ChangeKind.DEFAULT_CHANGED, "torch._dynamo.config.use_lamba_guard_for_object_aliasing")
    ]
    assert (lambda_guard.baseline, lambda_guard.candidate) == (True, False)
    scatter = found[
        (ChangeKind.DEFAULT_CHANGED, "torch._inductor.config.partitioned_scatter_max_partitions")
    ]
    assert (scatter.baseline, scatter.candidate) == (128, 64)
    assert (
        ChangeKind.CONFIG_REMOVED,
        "torch._inductor.config.cuda.nvgemm_max_profiling_configs",
    ) in found
    assert (ChangeKind.API_ADDED, "torch.linalg.polar") in found
    assert (ChangeKind.ENV_VAR_ADDED, "TORCH_DIST_USE_NCCL2") in found
    profile = found[(ChangeKind.SIGNATURE_CHANGED, "torch.profiler.profile")]
    assert profile.detail == "parameter use_cuda removed"
    assert (ChangeKind.API_REMOVED, "torch.return_types.qr") in found
    compile_change = found[(ChangeKind.SIGNATURE_CHANGED, "torch.compile")]
    assert compile_change.detail == "parameter shapes_spec renamed to dynamic_shapes"
    assert compile_change.alters_results
    # The same torch on both sides would be no change at all: nothing per-env leaks through.
    same = assess(surfaces["baseline"], surfaces["baseline"], ReleaseText(frozenset()), None)
    assert same.changes == ()


def test_seed_notes_announce_what_they_name_and_the_report_leads_with_the_rest(surfaces):
    text = ReleaseText.from_texts([SEED_NOTES.read_text()])
    changes = assess(surfaces["baseline"], surfaces["candidate"], text, None).changes
    by_symbol = {c.symbol: c for c in changes}
    assert by_symbol["torch._inductor.config.reorder_for_locality_in_training"].announced
    assert by_symbol[
        "torch._inductor.config.aten_distributed_optimizations.enable_simple_overlap"
    ].mentions == ("simple_overlap",)
    assert not by_symbol["torch._dynamo.config.use_lamba_guard_for_object_aliasing"].announced
    first = changes[0]
    assert not first.announced and first.alters_results
    assert first.kind is ChangeKind.DEFAULT_CHANGED


def test_fixture_project_hits_map_to_how_the_code_meets_each_change(surfaces):
    diff = assess(surfaces["baseline"], surfaces["candidate"], ReleaseText(frozenset()), PROJECT)
    assert diff.scan is not None and diff.scan.errors == ()
    met = {c.symbol: in_use(c) for c in diff.changes if c.hits}
    assert met == {
        "torch._dynamo.config.use_lamba_guard_for_object_aliasing": "relies-on-changed-default",
        "torch._inductor.config.partitioned_scatter_max_partitions": "sets-changed-default",
        "torch._inductor.config.cuda.nvgemm_max_profiling_configs": "uses-removed",
        "torch._inductor.config.partitioned_scatter_memory_budget": "uses-removed",
        "torch.compile": "calls-changed-signature",
        "torch.profiler.profile": "calls-changed-signature",
        "TORCH_CUPTI_MONITOR_LIBCUPTI_PATH": "uses",
        "torch.distributed.init_process_group": "uses",
        "torch.linalg.polar": "uses",
    }
    assert len(diff.scan.hits) == 11


def test_diff_command_reports_in_all_four_formats_says_no_go_and_a_second_reuses_both_surfaces(
    tmp_path,
):
    """One diff as a user runs it, its reports in all four formats; then the same diff
    again, which reuses both collected surfaces and finds the same changes."""
    args = ["diff", "--code", str(PROJECT), "--notes", str(SEED_NOTES)]
    out = tmp_path / "canary-results" / "latest"

    def diff() -> dict:
        result = run_canary(*args, "--quiet", cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        return json.loads((out / "results.json").read_text())

    report = diff()
    rows = report["sections"]["diff"]
    summary = next(r for r in rows if r["key"] == "__summary__")
    assert summary["payload"]["counts"]["default-changed"] >= 2
    assert len(rows) - 1 == summary["payload"]["total"]  # every change, in full
    reasons = report["decision_detail"]["reasons"]
    assert any("uses removed name(s)" in r and "nvgemm_max_profiling_configs" in r for r in reasons)
    assert any("relies on changed default(s)" in r for r in reasons)
    markdown = (out / "summary.md").read_text()
    assert "| default-changed |" in markdown and "trainer/compile_setup.py:22 (read)" in markdown
    html = (out / "report.html").read_text()
    assert "relies-on-changed-default" in html and "use_lamba_guard_for_object_aliasing" in html
    junit = (out / "junit.xml").read_text()
    assert 'name="uses-removed: torch._inductor.config.cuda.nvgemm_max_profiling_configs"' in junit

    first = {r["key"]: r for r in rows}
    assert "reused_made_at" not in first["__summary__"]["payload"]
    second = {r["key"]: r for r in diff()["sections"]["diff"]}
    made = second.pop("__summary__")["payload"].pop("reused_made_at")
    assert sorted(made) == ["baseline", "candidate"]
    del first["__summary__"]
    assert second == first  # every change, as the fresh collections found it
    markdown = (out / "summary.md").read_text()
    assert "(the baseline and candidate surface reused from an earlier run" in markdown


def test_resumed_section_reuses_stored_collections_and_scans_the_stack_project(
    surfaces, make_context
):
    ctx = make_context(
        sections=("diff", "stack"),
        settings={"diff": {}, "stack": {"command": "pytest", "cwd": str(PROJECT)}},
    )
    for role, collection in surfaces.items():
        ctx.store.save_artifact(
            ctx.run_id, f"diff/{role}.json", "application/json", json.dumps(collection).encode()
        )
    ctx.resume = True  # an earlier attempt stored both collections, then stopped
    section.run(ctx)
    assert ctx._workers == []  # nothing collected again
    rows = {r.key: r for r in ctx.store.section_results(ctx.run_id, "diff")}
    summary = rows.pop("__summary__")
    assert summary.payload["scan"]["root"] == str(PROJECT)  # the stack's project by default
    assert summary.payload["total"] == len(rows)
    removed = rows["config-removed:torch._inductor.config.partitioned_scatter_memory_budget"]
    assert removed.payload["in_use"] == "uses-removed"
    assert removed.payload["hits"][0]["line"] == 25


def test_failed_import_is_recorded_and_the_budget_stops_new_namespaces(baseline_env, import_root):
    worker = WorkerProcess(baseline_env.python, import_root)
    try:
        wanted = ["torch.linalg", "torch.no_such_namespace"]
        full = worker.call(COLLECT_SURFACE, {"namespaces": wanted}, timeout_s=600)
        rushed = worker.call(COLLECT_SURFACE, {"namespaces": wanted, "budget_s": 1e-6}, 600)
    finally:
        worker.close()
    assert full.ok and rushed.ok, full.error + rushed.error
    assert set(full.value["api"]) == {"torch.linalg", "torch.Tensor"}
    assert full.value["import_failures"]["torch.no_such_namespace"].startswith(
        "ModuleNotFoundError"
    )
    assert rushed.value["api"] == {}
    assert rushed.value["skipped_namespaces"] == [*wanted, "torch.Tensor"]
    assert rushed.value["config"]  # configuration is always collected
