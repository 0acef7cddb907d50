"""The policy: every documented key loads and is used, and every output judges by it."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cli_helpers import run_canary_here
from torchcanary.config import load_settings
from torchcanary.contract import JUnitCase, PlannedUnit, RunContext, Section
from torchcanary.errors import ConfigError
from torchcanary.plan import RunPlan
from torchcanary.policy import CORE_POLICY_DEFAULTS, decide, policy_defaults
from torchcanary.report.junit import render_junit
from torchcanary.report.view import load_run_view
from torchcanary.section_types import PolicyBounds, RunView
from torchcanary.sections import contract_gaps, get_section, section_names
from torchcanary.store.rows import SectionResult
from torchcanary.store.sqlite import SqliteStore

ALL_SECTIONS = section_names()
DRILL = "hang:timeout"


def _section_module(section: str) -> ModuleType:
    """A built-in section's ``section`` module, where its policy keys are documented."""
    package = type(get_section(section)).__module__.rpartition(".")[0]
    return importlib.import_module(package + ".section")


def _documented_policy_keys(section: str) -> set[str]:
    """The keys a section's docstring names after its "Policy keys" heading."""
    doc = _section_module(section).__doc__ or ""
    assert "Policy keys" in doc, f"{section} documents no policy keys"
    part = doc[doc.index("Policy keys") :]
    named = set(re.findall(r"``(\w+)``", part)) | set(re.findall(r"^\s+(\w+) =", part, re.M))
    return named - {"blocking_reasons"}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # numbers, strings and lists of strings read the same in TOML


@pytest.mark.parametrize("section", ALL_SECTIONS)
def test_every_documented_policy_key_is_declared_with_one_spelling(section: str) -> None:
    declared = getattr(_section_module(section), "POLICY_DEFAULTS", None)
    assert declared is not None, f"{section} declares no POLICY_DEFAULTS"
    assert _documented_policy_keys(section) == set(declared)
    assert dict(get_section(section).policy_defaults) == declared


def test_no_policy_key_is_claimed_by_two_sections() -> None:
    keys = [key for s in ALL_SECTIONS for key in get_section(s).policy_defaults]
    assert len(keys) == len(set(keys))


def test_a_policy_file_with_every_documented_key_loads_for_every_subcommand(
    tmp_path: Path,
) -> None:
    everything = {key: value for s in ALL_SECTIONS for key, value in policy_defaults((s,)).items()}
    lines = [f"{key} = {_toml_value(value)}" for key, value in everything.items()]
    (tmp_path / "policy.toml").write_text("[policy]\n" + "\n".join(lines) + "\n")
    for sections in [list(ALL_SECTIONS), *([s] for s in ALL_SECTIONS)]:
        # A stack or calls section without a command is left out.
        commands = {"stack": {"command": "pytest -q"}, "calls": {"command": "pytest -q"}}
        flags = {"policy_file": "policy.toml", "sections": sections, "section_overrides": commands}
        policy = load_settings(None, flags, tmp_path).plan.policy
        assert policy == CORE_POLICY_DEFAULTS | policy_defaults(tuple(sections))


def _bench_slower(ratio: float) -> SectionResult:
    payload = {
        "kind": "linear",
        "aa": False,
        "ratio": ratio,
        "ci_low": ratio - 0.01,
        "ci_high": ratio + 0.01,
        "q_value": 1e-4,
        "reasons": [],
        "harness": {"measure_s": 1.0},
    }
    return SectionResult("bench", "linear/x", "both", "slower", payload)


def _drill(role: str, detect_s: float) -> SectionResult:
    payload = {"detect_s": detect_s, "resume_s": 1.0, "reason": ""}
    return SectionResult("drill", DRILL, role, "passed", payload)


def _planned(*bench_ids: str) -> dict[str, dict[str, Any]]:
    """Section tables that plan exactly the units these tests store: the bench's
    benchmarks by id, the drill's one fault (one trial each)."""
    benchmarks = [{"kind": "synthetic", "op": "add", "id": bench_id} for bench_id in bench_ids]
    return {"bench": {"families": [], "benchmarks": benchmarks}, "drill": {"faults": [DRILL]}}


def _plan(*bench_ids: str, **fields: Any) -> RunPlan:
    """A plan of the bench alone whose planned units are ``bench_ids``."""
    overrides = _planned(*bench_ids)
    settings = {"bench": get_section("bench").parse_settings(overrides["bench"])}
    return RunPlan("torch==2.13.0", "torch==2.14.1", ("bench",), settings=settings, **fields)


def _stored_view(store: SqliteStore, plan: RunPlan, results: list[SectionResult]) -> RunView:
    run_id = store.create_run(plan.to_json())
    for result in results:
        store.save_section_result(run_id, result)
    return load_run_view(store, run_id)


@pytest.mark.parametrize(
    ("section", "line", "results", "blocks_by_default", "blocks_with_file"),
    [
        ("bench", "bench_max_slowdown = 0.1", [_bench_slower(1.08)], True, False),
        (
            "drill",
            "drill_max_slowdown = 2.0",
            [_drill("baseline", 4.0), _drill("candidate", 10.0)],
            False,
            True,
        ),
    ],
)
def test_a_threshold_from_the_policy_file_decides_the_run(
    tmp_path: Path,
    store: SqliteStore,
    section: str,
    line: str,
    results: list[SectionResult],
    blocks_by_default: bool,
    blocks_with_file: bool,
) -> None:
    (tmp_path / "policy.toml").write_text(line + "\n")
    flags: dict[str, Any] = {"sections": [section], "section_overrides": _planned("linear/x")}
    default_plan = load_settings(None, flags, tmp_path).plan
    filed_plan = load_settings(None, flags | {"policy_file": "policy.toml"}, tmp_path).plan
    for plan, blocks in ((default_plan, blocks_by_default), (filed_plan, blocks_with_file)):
        view = _stored_view(store, plan, results)
        assert decide(view, plan.policy, plan.sections, {}).go is not blocks, plan.policy


def test_a_bench_that_measured_nothing_is_never_a_go(store: SqliteStore) -> None:
    plan = _plan("linear/a", "gemm/b")
    skipped = [
        SectionResult("bench", key, "both", "skipped", {"kind": "linear", "reason": why})
        for key, why in (("linear/a", "needs cuda"), ("gemm/b", "dtype unsupported"))
    ]
    decision = decide(_stored_view(store, plan, skipped), plan.policy, plan.sections, {})
    assert not decision.go
    assert decision.reasons == (
        "bench: none of the 2 benchmarks was measured on both sides, so nothing was "
        "compared (gemm/b: dtype unsupported)",
    )


def test_a_bench_that_judged_nothing_is_never_a_go(store: SqliteStore) -> None:
    # One worker group: every interval is unbounded, so no benchmark got a verdict.
    plan = _plan("linear/a", "gemm/b")
    why = "the interval is unbounded (1 worker group); more worker groups are needed"
    noisy = [
        SectionResult(
            "bench",
            key,
            "both",
            "too-noisy",
            {"kind": "linear", "aa": False, "ratio": 1.0, "reasons": [why], "harness": {}},
        )
        for key in ("linear/a", "gemm/b")
    ]
    decision = decide(_stored_view(store, plan, noisy), plan.policy, plan.sections, {})
    assert not decision.go
    assert decision.reasons == (
        f"bench: none of the 2 benchmarks could be judged (gemm/b: {why}); give the bench "
        "more worker groups (groups >= 3) or a quieter machine",
    )
    judged = [*noisy, _bench_slower(1.01)]
    judged_plan = _plan("linear/a", "gemm/b", "linear/x")
    assert decide(_stored_view(store, judged_plan, judged), plan.policy, plan.sections, {}).go


def test_bench_junit_judges_a_slowdown_by_the_runs_own_policy(store: SqliteStore) -> None:
    for allowed, expected in ((0.10, "passed"), (0.05, "failure")):
        policy = {"bench_max_slowdown": allowed}
        plan = _plan("linear/x", policy=policy)
        view = _stored_view(store, plan, [_bench_slower(1.08)])
        junit = render_junit(view, ("bench",))
        assert ("<failure" in junit) is (expected == "failure"), junit
        decision = decide(view, plan.policy, plan.sections, {})
        assert decision.go is (expected == "passed")


def test_junit_carries_the_runs_decision_with_every_reason(store: SqliteStore) -> None:
    plan = RunPlan("torch==2.13.0", "torch==2.14.1", sections=("bench", "stack"))
    run_id = store.create_run(plan.to_json())
    store.save_section_result(run_id, _bench_slower(1.08))
    decision = decide(load_run_view(store, run_id), plan.policy, plan.sections, {})
    store.finish_run(run_id, decision.label, decision.to_json())
    junit = render_junit(load_run_view(store, run_id), plan.sections)
    assert not decision.go
    assert '<testcase classname="torchcanary" name="decision"' in junit
    assert "no-go: linear/x" in junit and "section stack was asked for" in junit


# numbers a policy key declares bounds for ------------------------------------------------
@pytest.mark.parametrize(
    ("line", "words"),
    [
        # a percentage written as a whole number, where the key takes a fraction
        (
            "bench_max_slowdown = 5",
            "'bench_max_slowdown' = 5.0 is out of bounds: use a number "
            "from 0 to 1 (a fraction of the baseline's time: 0.05 is 5%)",
        ),
        ("bench_max_slowdown = -0.1", "from 0 to 1"),
        # a count below zero
        (
            "stack_max_new_failures = -1",
            "'stack_max_new_failures' = -1 is out of bounds: use a "
            "number at least 0 (a count of tests)",
        ),
        # a factor below one, a tolerance above one, negative seconds
        (
            "drill_max_slowdown = 0.5",
            "'drill_max_slowdown' = 0.5 is out of bounds: use a number at least 1",
        ),
        (
            "drill_loss_rtol = 2.0",
            "'drill_loss_rtol' = 2.0 is out of bounds: use a number from 0 to 1",
        ),
        (
            "drill_slowdown_floor_s = -5",
            "'drill_slowdown_floor_s' = -5.0 is out of bounds: use a number at least 0 (seconds)",
        ),
    ],
)
def test_a_policy_number_outside_its_declared_bounds_is_refused_at_load(
    tmp_path: Path, line: str, words: str
) -> None:
    (tmp_path / "policy.toml").write_text(f"[policy]\n{line}\n")
    flags = {"policy_file": "policy.toml", "sections": ["bench"]}  # others' keys checked too
    with pytest.raises(ConfigError) as refused:
        load_settings(None, flags, tmp_path)
    assert words in str(refused.value)


def test_a_policy_number_at_its_bounds_is_accepted(tmp_path: Path) -> None:
    lines = [
        "bench_max_slowdown = 1",
        "stack_max_new_failures = 0",
        "drill_max_slowdown = 1",
        "drill_loss_rtol = 0",
        "drill_slowdown_floor_s = 0",
    ]
    (tmp_path / "policy.toml").write_text("[policy]\n" + "\n".join(lines) + "\n")
    flags = {"policy_file": "policy.toml", "sections": ["bench", "drill"]}
    policy = load_settings(None, flags, tmp_path).plan.policy
    assert (policy["bench_max_slowdown"], policy["drill_max_slowdown"]) == (1.0, 1.0)


class _BoundedSection(Section):
    """A section whose bounds are wrong twice: one excludes its own default, one is on a
    key that is not a number."""

    name = "x"
    order = 1
    help = None
    policy_defaults = {"limit": 5, "strict": True}  # noqa: RUF012 (a contract value)
    policy_bounds = {"limit": PolicyBounds(0, 1), "strict": PolicyBounds(0, 1)}  # noqa: RUF012
    checked_verdicts = frozenset({"done"})

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        return []

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def run(self, ctx: RunContext) -> None:
        return None

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        return []

    def html(self, view: RunView) -> str:
        return ""

    def markdown(self, view: RunView) -> str:
        return ""

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        return []


def test_every_declared_bound_holds_its_keys_default_and_names_a_numeric_key() -> None:
    for name in ALL_SECTIONS:
        section = get_section(name)
        for key, bounds in section.policy_bounds.items():
            default = section.policy_defaults[key]
            assert isinstance(default, (int, float)) and not isinstance(default, bool), key
            assert bounds.admits(default), key
    assert contract_gaps(_BoundedSection()) == [
        "policy key 'limit' has a default 5 outside its bounds",
        "policy_bounds names 'strict', which is not one of its numeric policy keys",
    ]


def test_a_policy_number_out_of_bounds_stops_the_cli_with_one_line_before_the_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.toml").write_text("[policy]\nbench_max_slowdown = 5\n")
    result = run_canary_here("run", "--only", "claims", "--policy", "policy.toml", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("torchcanary:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "'bench_max_slowdown' = 5.0 is out of bounds" in lines[0] and "0.05 is 5%" in lines[0]
    assert not (tmp_path / "canary-results").exists()  # no run was started
