"""The code scan finds every use of a changed name through any import style, and nothing in
comments, strings or look-alike names; bad input is reported, never a hang or a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary_here
from torchcanary.diff.codescan import ChangedNames, scan_code

PROJECT = FIXTURES / "surface_project"
NAMES = ChangedNames(
    symbols=frozenset(
        {
            "torch._inductor.config.partitioned_scatter_max_partitions",
            "torch._inductor.config.cuda.nvgemm_max_profiling_configs",
            "torch._inductor.config.partitioned_scatter_memory_budget",
            "torch._dynamo.config.use_lamba_guard_for_object_aliasing",
            "torch.compile",
            "torch.distributed.init_process_group",
            "torch.linalg.polar",
            "torch.profiler.profile",
        }
    ),
    env_vars=frozenset({"TORCH_CUPTI_MONITOR_LIBCUPTI_PATH"}),
    config_modules=frozenset({"torch._inductor.config", "torch._dynamo.config"}),
)
SETUP = "trainer/compile_setup.py"
DIST = "trainer/distributed.py"
# Every hit the fixture project holds: (file, line, name, use).
EXPECTED_HITS = {
    (SETUP, 15, "torch._inductor.config.partitioned_scatter_max_partitions", "set"),
    (SETUP, 16, "torch._inductor.config.cuda.nvgemm_max_profiling_configs", "set"),
    (SETUP, 17, "TORCH_CUPTI_MONITOR_LIBCUPTI_PATH", "set"),
    (SETUP, 22, "torch._dynamo.config.use_lamba_guard_for_object_aliasing", "read"),
    (SETUP, 25, "torch._inductor.config.partitioned_scatter_memory_budget", "set"),
    (SETUP, 27, "torch.compile", "call"),
    (DIST, 3, "torch.distributed.init_process_group", "import"),
    (DIST, 4, "torch.linalg.polar", "import"),
    (DIST, 12, "torch.distributed.init_process_group", "call"),
    (DIST, 17, "torch.linalg.polar", "call"),
    ("trainer/profiling.py", 7, "torch.profiler.profile", "call"),
}


def _hits(result) -> set[tuple[str, int, str, str]]:
    return {(hit.path, hit.line, hit.symbol, hit.use) for hit in result.hits}


def test_every_import_style_resolves_to_the_changed_name_and_nothing_else_hits():
    result = scan_code(PROJECT, NAMES)
    assert _hits(result) == EXPECTED_HITS
    assert result.files_scanned == 5 and result.errors == ()


def test_comments_strings_docstrings_and_lookalike_names_never_hit():
    result = scan_code(PROJECT, NAMES)
    # Lines 9-10 mention changed names in a comment and a string, 14 in a docstring, 18
    # prints an env var name; unrelated.py has its own `config` class and an env read.
    assert not [h for h in result.hits if h.path == SETUP and h.line in (9, 10, 14, 18)]
    assert not [h for h in result.hits if h.path == "trainer/unrelated.py"]
    assert not [h for h in result.hits if h.path == DIST and h.line in (8, 13)]


def test_each_hit_carries_its_source_line():
    result = scan_code(PROJECT, NAMES)
    compile_hit = next(h for h in result.hits if h.symbol == "torch.compile")
    assert compile_hit.code == "return th.compile(model, shapes_spec=None)"


def test_file_that_does_not_parse_is_reported_and_the_scan_goes_on(tmp_path: Path):
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "good.py").write_text("import torch\ntorch.linalg.polar(x)\n")
    result = scan_code(tmp_path, NAMES)
    assert [(h.path, h.line, h.use) for h in result.hits] == [("good.py", 2, "call")]
    assert len(result.errors) == 1
    path, error = result.errors[0]
    assert path == "broken.py" and error.startswith("does not parse: line 1")


@pytest.mark.timeout(60)
def test_symlink_loops_neither_hang_nor_stop_the_scan(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "use.py").write_text("from torch.linalg import polar\n")
    os.symlink(tmp_path, package / "loop")  # a directory link back up the tree
    os.symlink(package / "b.py", package / "a.py")  # two file links pointing at each other
    os.symlink(package / "a.py", package / "b.py")
    result = scan_code(tmp_path, NAMES)
    assert _hits(result) == {("pkg/use.py", 1, "torch.linalg.polar", "import")}
    assert sorted(path for path, _ in result.errors) == ["pkg/a.py", "pkg/b.py"]


def test_missing_code_path_is_a_usage_error_in_one_line(tmp_path: Path):
    result = run_canary_here("diff", "--code", "no/such/dir", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("torchcanary:")]
    assert len(lines) == 1 and "diff.code" in lines[0] and "does not exist" in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_diff_config_key_is_a_usage_error(tmp_path: Path):
    (tmp_path / "canary.toml").write_text('sections = ["diff"]\n[diff]\ncodes = "."\n')
    result = run_canary_here("run", cwd=tmp_path)
    assert result.returncode == 2 and "diff.codes" in result.stderr
