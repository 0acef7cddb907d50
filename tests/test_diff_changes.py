"""Comparing two collections, deciding "announced", and the policy: pure specifications."""

from __future__ import annotations

from dataclasses import dataclass, field

from torchcanary.diff.changes import ChangeKind, SurfaceChange, compare_surfaces, signature_delta
from torchcanary.diff.section import CHECKED_VERDICTS, blocking_reasons, planned_units
from torchcanary.plan import RunPlan
from torchcanary.release_text import ReleaseText
from torchcanary.section_types import PlannedUnit
from torchcanary.store.rows import SUMMARY_KEY, SectionResult

REQUIRED = ["x", "positional-or-keyword", None, False]


def _param(name: str, default: object = None, has_default: bool = True) -> list[object]:
    return [name, "positional-or-keyword", default, has_default]


def test_renamed_parameter_is_named_as_a_rename_and_can_break_calls():
    notes, breaking = signature_delta(
        [REQUIRED, _param("shapes_spec")], [REQUIRED, _param("dynamic_shapes")]
    )
    assert notes == ["parameter shapes_spec renamed to dynamic_shapes"] and breaking


def test_new_optional_parameter_does_not_break_calls_but_a_changed_default_does():
    assert signature_delta([REQUIRED], [REQUIRED, _param("weights_only", False)]) == (
        ["parameter weights_only=False added"],
        False,
    )
    notes, breaking = signature_delta([REQUIRED, _param("k", 1)], [REQUIRED, _param("k", 2)])
    assert notes == ["default of k: 1 -> 2"] and breaking


def test_removed_and_newly_required_parameters_break_calls():
    notes, breaking = signature_delta([REQUIRED, _param("a")], [REQUIRED])
    assert notes == ["parameter a removed"] and breaking
    notes, breaking = signature_delta([REQUIRED], [REQUIRED, _param("b", has_default=False)])
    assert notes == ["required parameter b added"] and breaking


def _surface(config: dict, api: dict, env: dict | None = None) -> dict:
    return {"config": config, "api": api, "env_vars": env or {}, "build": {}}


def test_every_kind_is_found_with_both_values_and_results_altering_first():
    baseline = _surface(
        {"torch._inductor.config": {"a": 1, "gone": True}},
        {"torch.linalg": {"old": {"kind": "function", "signature": None}}},
        {"TORCH_OLD": "x.py"},
    )
    candidate = _surface(
        {"torch._inductor.config": {"a": 2, "new_on": True, "new_off": False}},
        {"torch.linalg": {"fresh": {"kind": "function", "signature": None}}},
        {"TORCH_NEW": "y.py"},
    )
    changes = compare_surfaces(baseline, candidate)
    found = [(c.kind, c.symbol, c.baseline, c.candidate, c.alters_results) for c in changes]
    assert found == [
        (ChangeKind.DEFAULT_CHANGED, "torch._inductor.config.a", 1, 2, True),
        (ChangeKind.CONFIG_REMOVED, "torch._inductor.config.gone", True, None, True),
        (ChangeKind.API_REMOVED, "torch.linalg.old", "function", None, True),
        (ChangeKind.ENV_VAR_REMOVED, "TORCH_OLD", "x.py", None, True),
        (ChangeKind.CONFIG_ADDED, "torch._inductor.config.new_on", None, True, True),
        (ChangeKind.CONFIG_ADDED, "torch._inductor.config.new_off", None, False, False),
        (ChangeKind.API_ADDED, "torch.linalg.fresh", None, "function", False),
        (ChangeKind.ENV_VAR_ADDED, "TORCH_NEW", None, "y.py", False),
    ]


def test_unreadable_signature_on_one_side_is_not_a_change():
    old = {"torch": {"qr": {"kind": "function", "signature": None}}}
    new = {"torch": {"qr": {"kind": "function", "signature": [REQUIRED]}}}
    assert compare_surfaces(_surface({}, old), _surface({}, new)) == []


def test_notes_announce_what_they_name_in_code_like_words_only():
    text = ReleaseText.from_texts(
        [
            "Inductor defaults: simple_overlap reordering is on; torch.switch generalises "
            "torch.cond; single-token paths through F.linear; NVGEMM autotuning."
        ]
    )
    named = {
        "torch._inductor.config.aten_distributed_optimizations.enable_simple_overlap",
        "torch.switch",
        "torch.nn.functional.linear",
    }
    unnamed = {"torch._inductor.config.nvgemm_max_profiling_configs", "torch.nn.functional.relu"}
    for symbol in named | unnamed:
        change = SurfaceChange(ChangeKind.DEFAULT_CHANGED, symbol)
        assert bool(text.naming(change.symbol)) == (symbol in named), symbol


@dataclass
class _View:
    sections: dict[str, list[SectionResult]] = field(default_factory=dict)


def _row(kind: str, symbol: str, in_use: str | None, **payload: object) -> SectionResult:
    return SectionResult(
        "diff", f"{kind}:{symbol}", "both", kind, {"symbol": symbol, "in_use": in_use, **payload}
    )


def test_policy_blocks_on_removed_and_relied_defaults_by_default_and_can_be_relaxed():
    view = _View(
        {
            "diff": [
                SectionResult("diff", SUMMARY_KEY, "both", "changes", {}),
                _row("config-removed", "torch._inductor.config.gone", "uses-removed"),
                _row("default-changed", "torch._dynamo.config.x", "relies-on-changed-default"),
                _row("default-changed", "torch._dynamo.config.y", "sets-changed-default"),
                _row("signature-changed", "torch.compile", "calls-changed-signature"),
                _row("default-changed", "torch.z", None, alters_results=True, announced=False),
            ]
        }
    )
    reasons = blocking_reasons(view, {})
    assert reasons == [
        "diff: your code uses removed name(s): torch._inductor.config.gone",
        "diff: your code relies on changed default(s): torch._dynamo.config.x",
    ]
    relaxed = {"diff_block_on_removed": False, "diff_block_on_relied_default": False}
    assert blocking_reasons(view, relaxed) == []
    strict = {"diff_block_on_signature": True, "diff_block_on_unannounced": True}
    assert len(blocking_reasons(view, strict)) == 4


def test_a_diff_that_could_not_be_compared_is_a_comparison_that_did_not_run():
    """Issue 28: an uncompared diff is no objection of the diff's own keys but its one
    planned unit left unchecked, which the core rule (``block_on_not_run``) objects to."""
    reason = "candidate: crashed: worker killed by SIGKILL"
    view = _View(
        {"diff": [SectionResult("diff", SUMMARY_KEY, "both", "not-compared", {"reason": reason})]}
    )
    relaxed = {key: False for key in ("diff_block_on_removed", "diff_block_on_relied_default")}
    assert blocking_reasons(view, relaxed) == []
    assert planned_units(RunPlan("torch==2.13.0", "torch==2.14.1")) == [
        PlannedUnit(SUMMARY_KEY, "both")
    ]
    assert "not-compared" not in CHECKED_VERDICTS


def test_the_sentence_that_names_a_symbol_is_quoted_whole_and_others_are_not():
    text = ReleaseText.from_texts(
        [
            "# Notes\n\n- `torch.cholesky`, deprecated since 1.9, is removed; use "
            "`torch.linalg.cholesky`.\n- Faster kernels. The F.linear path skips a copy.",
        ]
    )
    assert text.quote(text.naming("torch.cholesky")) == (
        "`torch.cholesky`, deprecated since 1.9, is removed; use `torch.linalg.cholesky`."
    )
    linear = text.naming("torch.nn.functional.linear")
    assert text.quote(linear) == "The F.linear path skips a copy."
    assert text.quote(text.naming("torch.nn.functional.relu")) is None
