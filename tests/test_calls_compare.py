"""The calls section's pure comparison: one recorded call's replays, verdict and words."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import pytest

from torchcanary.calls.compare import CallVerdict, Replay, compare_call


def _float_tensor(values: list[float]) -> dict[str, Any]:
    meta = {
        "t": "tensor",
        "dtype": "torch.float32",
        "shape": [len(values)],
        "stride": [1],
        "device": "cpu",
        "layout": "torch.strided",
        "alias_of": None,
        "data": {"b64": base64.b64encode(struct.pack(f"={len(values)}f", *values)).decode()},
    }
    return meta


def _returned(values: list[float], **extra: Any) -> Replay:
    line = {"status": "returned", "outputs": [{**_float_tensor(values), **extra}], "warnings": []}
    return Replay.from_json(line)


def test_a_call_that_raises_only_in_the_candidate_is_raises_now_with_both_sides_named() -> None:
    raised = Replay.from_json(
        {"status": "raised", "exception": {"type": "UnpicklingError", "message": "weights"}}
    )
    found = compare_call(_returned([1.0]), raised, _returned([1.0]))
    assert found.verdict is CallVerdict.RAISES_NOW
    expected = "returns in the baseline, raises UnpicklingError: weights in the candidate"
    assert found.detail == expected


def test_a_callable_gone_from_the_candidate_is_raises_now() -> None:
    found = compare_call(_returned([1.0]), Replay.from_json({"status": "missing"}))
    assert found.verdict is CallVerdict.RAISES_NOW
    assert "does not exist" in found.detail


def test_values_beyond_the_dtype_tolerance_are_a_different_result_with_the_relative_error() -> None:
    found = compare_call(_returned([1.0, 2.0]), _returned([1.0, 2.01]))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.detail.startswith("output 0: max relative difference 0.005 (tolerance 1.3e-06)")


def test_values_within_the_dtype_tolerance_are_the_same() -> None:
    found = compare_call(_returned([1.0, 2.0]), _returned([1.0, 2.0 + 1e-7]))
    assert found.verdict is CallVerdict.SAME


def test_changed_output_metadata_is_named() -> None:
    found = compare_call(_returned([1.0]), _returned([1.0], stride=[2]))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.detail == "output 0: stride [1] -> [2]"


def test_a_call_whose_two_baseline_replays_differ_is_nondeterministic_not_a_change() -> None:
    found = compare_call(_returned([1.0]), _returned([2.0]), control=_returned([3.0]))
    assert found.verdict is CallVerdict.NONDETERMINISTIC


def test_a_change_beyond_what_the_control_shows_is_a_different_result() -> None:
    found = compare_call(_returned([1.0]), _returned([5.0]), control=_returned([1.5]))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.max_rel_err == 4.0


def test_a_call_that_raises_now_is_raises_now_even_when_the_control_differs() -> None:
    raised = Replay.from_json(
        {"status": "raised", "exception": {"type": "RuntimeError", "message": "gone"}}
    )
    found = compare_call(_returned([1.0]), raised, control=_returned([2.0]))
    assert found.verdict is CallVerdict.RAISES_NOW
    gone = Replay.from_json({"status": "missing"})
    missing = compare_call(_returned([1.0]), gone, control=_returned([2.0]))
    assert missing.verdict is CallVerdict.RAISES_NOW


def test_new_and_gone_warnings_are_listed() -> None:
    warned = {"status": "returned", "warnings": [{"category": "FutureWarning", "message": "x"}]}
    found = compare_call(Replay.from_json({"status": "returned"}), Replay.from_json(warned))
    assert found.verdict is CallVerdict.NEW_WARNING
    assert found.new_warnings == ["FutureWarning: x"]
    back = compare_call(Replay.from_json(warned), Replay.from_json({"status": "returned"}))
    assert back.verdict is CallVerdict.SAME and back.gone_warnings == ["FutureWarning: x"]


def test_a_call_whose_replay_broke_off_is_not_run_and_an_unrecordable_one_not_replayable() -> None:
    """Issue 38 item 1: a replay that crashed or timed out compared nothing; it is not an
    honest "cannot be replayed" but a unit of the call set left unchecked."""
    crashed = compare_call(_returned([1.0]), Replay.from_json({"status": "crashed"}))
    assert crashed.verdict is CallVerdict.NOT_RUN
    assert crashed.detail == "crashed when replayed in the candidate"
    hung = compare_call(Replay.from_json({"status": "timeout"}), _returned([1.0]))
    assert (hung.verdict, hung.detail) == (
        CallVerdict.NOT_RUN,
        "timeout when replayed in the baseline",
    )
    missing = compare_call(_returned([1.0]), None)
    assert missing.verdict is CallVerdict.NOT_RUN
    assert missing.detail == "no replay written when replayed in the candidate"
    opaque = compare_call(None, None, why_not="argument of type Generator")
    assert opaque.verdict is CallVerdict.NOT_REPLAYABLE
    assert opaque.detail == "argument of type Generator"


def test_an_output_that_now_aliases_its_input_is_named() -> None:
    found = compare_call(_returned([1.0]), _returned([1.0], alias_of=0))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.detail == "output 0: alias_of None -> 0"


def test_an_exception_whose_message_grew_names_what_it_adds() -> None:
    def raised(message: str) -> Replay:
        exception = {"type": "builtins.RuntimeError", "message": message}
        return Replay.from_json({"status": "raised", "exception": exception})

    found = compare_call(raised("sizes differ"), raised("sizes differ\nraised from cat.h:3"))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    expected = (
        "raises RuntimeError: sizes differ in both; the message now adds: raised from cat.h:3"
    )
    assert found.detail == expected


def test_the_values_of_uninitialised_outputs_are_not_compared() -> None:
    line = {"status": "returned", "outputs": [_float_tensor([1.0])]}
    other = {"status": "returned", "outputs": [_float_tensor([9.0])]}
    found = compare_call(Replay.from_json(line, False), Replay.from_json(other, False))
    assert found.verdict is CallVerdict.SAME


def _recorded(fingerprint: dict[str, Any] | None) -> dict[str, Any]:
    meta = {k: v for k, v in _float_tensor([1.0]).items() if k not in ("data", "alias_of")}
    return {"status": "returned", "outputs": [{**meta, "fingerprint": fingerprint}]}


def _fingerprinted(value: float) -> Replay:
    fingerprint = {"sum": value, "abs": abs(value), "nonfinite": 0}
    return _returned([value], fingerprint=fingerprint)


def test_a_baseline_replay_that_raises_where_the_call_returned_is_not_faithful_never_same() -> None:
    raised = Replay.from_json(
        {"status": "raised", "exception": {"type": "builtins.RuntimeError", "message": "leaf"}}
    )
    recorded = _recorded({"sum": 1.0, "abs": 1.0, "nonfinite": 0})
    found = compare_call(raised, raised, raised, recorded=recorded)
    assert found.verdict is CallVerdict.NOT_FAITHFUL
    assert found.detail == (
        "replay not faithful: returned when recorded, raised RuntimeError in the baseline replay"
    )


def test_a_baseline_replay_with_other_values_than_recorded_is_not_faithful() -> None:
    recorded = _recorded({"sum": 1.0, "abs": 1.0, "nonfinite": 0})
    other = _fingerprinted(2.0)
    found = compare_call(other, other, other, recorded=recorded)
    assert found.verdict is CallVerdict.NOT_FAITHFUL
    same = _fingerprinted(1.0 + 1e-7)  # another summation order: still the recorded call
    assert compare_call(same, same, same, recorded=recorded).verdict is CallVerdict.SAME


def test_a_call_without_a_recorded_outcome_is_not_faithful() -> None:
    found = compare_call(_returned([1.0]), _returned([1.0]), recorded={})
    assert found.verdict is CallVerdict.NOT_FAITHFUL
    assert found.detail == "replay not faithful: no outcome was recorded for this call"


def _mutating(values: list[float] | None) -> Replay:
    """An in-place op: returns nothing; its argument 0 changed to ``values`` (None: not)."""
    changed = [] if values is None else [{"arg": "0", **_float_tensor(values)}]
    line = {"status": "returned", "outputs": [{"t": "none"}], "mutated": changed}
    return Replay.from_json(line)


def test_an_in_place_op_that_updates_its_argument_otherwise_is_a_different_result() -> None:
    found = compare_call(_mutating([2.0]), _mutating([3.0]), control=_mutating([2.0]))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.detail.startswith("argument 0 after the call: max relative difference 0.5")
    stopped = compare_call(_mutating([2.0]), _mutating(None), control=_mutating([2.0]))
    assert stopped.verdict is CallVerdict.DIFFERENT_RESULT
    assert stopped.detail == "changes argument(s) 0, then none"
    assert compare_call(_mutating([2.0]), _mutating([2.0])).verdict is CallVerdict.SAME


def _complex(parts: list[float]) -> Replay:
    """A complex64 output of len(parts) / 2 values (real, imaginary, ...)."""
    tensor = {**_float_tensor(parts), "dtype": "torch.complex64", "shape": [len(parts) // 2]}
    return Replay.from_json({"status": "returned", "outputs": [tensor]})


def test_complex_outputs_are_compared_with_their_parts_tolerance_not_byte_for_byte() -> None:
    one_ulp = struct.unpack("=f", struct.pack("=I", 0x3F800001))[0]  # 1.0 and one ULP
    same = compare_call(_complex([1.0, 2.0]), _complex([one_ulp, 2.0]))
    assert same.verdict is CallVerdict.SAME
    moved = compare_call(_complex([1.0, 2.0]), _complex([1.0, 2.02]))
    assert moved.verdict is CallVerdict.DIFFERENT_RESULT
    assert moved.max_rel_err == pytest.approx(0.02 / abs(complex(1.0, 2.0)))


def test_complex_values_are_close_as_assert_close_says_by_their_distance_not_part_by_part() -> None:
    """``torch.testing.assert_close`` allows ``|out - ref| <= atol + rtol * |ref|``: beside a
    real part of 1e6, an imaginary part of 1 may move by 0.01 (within 1.3 of 1e6); part by
    part, that was a relative change of 1 % and a false different-result."""
    beside_large = compare_call(_complex([1e6, 1.0]), _complex([1e6, 1.01]))
    assert beside_large.verdict is CallVerdict.SAME
    moved = compare_call(_complex([1e6, 1.0]), _complex([1e6, 3.0]))
    assert moved.verdict is CallVerdict.DIFFERENT_RESULT
    assert moved.detail.startswith("output 0: max relative difference 2e-06 (tolerance 1.3e-06)")
    nan = compare_call(_complex([1.0, 2.0]), _complex([float("nan"), 2.0]))
    assert nan.verdict is CallVerdict.DIFFERENT_RESULT
    both_nan = compare_call(_complex([float("nan"), 2.0]), _complex([float("nan"), 2.0]))
    assert both_nan.verdict is CallVerdict.SAME


def _kept_in_file(path: Path, values: list[float]) -> Replay:
    """A float32 output too large for its line: its values in the replay's values file."""
    path.write_bytes(struct.pack(f"={len(values)}f", *values))
    tensor = {**_float_tensor([0.0]), "shape": [len(values)]}
    tensor["data"] = {"offset": 0, "length": path.stat().st_size}
    return Replay.from_json({"status": "returned", "outputs": [tensor]}, values_file=path)


def test_a_large_output_that_differs_in_one_element_is_a_different_result_never_same(
    tmp_path: Path,
) -> None:
    values = [float(n) for n in range(5000)]
    changed = [*values[:4321], 4321.5, *values[4322:]]
    baseline = _kept_in_file(tmp_path / "replay-baseline.values.bin", values)
    candidate = _kept_in_file(tmp_path / "replay-candidate.values.bin", changed)
    found = compare_call(baseline, candidate, control=baseline)
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert "1 of 5000 element(s) beyond" in found.detail
    same = compare_call(baseline, baseline, control=baseline)
    assert (same.verdict, same.metadata_only) == (CallVerdict.SAME, None)  # compared by value


def _unkept(total: float, magnitude: float, nonfinite: int = 0) -> Replay:
    """An output whose values were not kept (past the replay's budget): its fingerprint."""
    tensor = {**_float_tensor([0.0]), "shape": [1000], "data": None, "why_no_data": "budget"}
    tensor["fingerprint"] = {"sum": total, "abs": magnitude, "nonfinite": nonfinite}
    return Replay.from_json({"status": "returned", "outputs": [tensor]})


def test_an_output_whose_values_were_not_kept_is_compared_by_its_fingerprint() -> None:
    # 1000 float32 values summing to 500 in magnitude: within tolerance, the sums move by at
    # most 1000 * 1e-5 + 1.3e-6 * 500 (about 0.0107)
    moved = compare_call(_unkept(500.0, 500.0), _unkept(501.0, 501.0))
    assert moved.verdict is CallVerdict.DIFFERENT_RESULT
    assert moved.detail.startswith("output 0: sum of values 500 -> 501, beyond what")
    close = compare_call(_unkept(500.0, 500.0), _unkept(500.005, 500.005))
    assert (close.verdict, close.metadata_only) == (CallVerdict.SAME, "budget")
    nan = compare_call(_unkept(500.0, 500.0), _unkept(500.0, 500.0, nonfinite=1))
    assert nan.detail == "output 0: 0 non-finite value(s), then 1"


def _raw_output(dtype: str, raw: bytes) -> Replay:
    tensor = {**_float_tensor([0.0]), "dtype": f"torch.{dtype}", "shape": [1]}
    tensor["data"] = {"b64": base64.b64encode(raw).decode()}
    return Replay.from_json({"status": "returned", "outputs": [tensor]})


def test_float8_and_unsigned_outputs_are_compared_by_value_exactly_as_assert_close_does() -> None:
    one, one_and_an_eighth = _raw_output("float8_e4m3fn", b"\x38"), b"\x39"
    found = compare_call(one, _raw_output("float8_e4m3fn", one_and_an_eighth))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT and found.max_rel_err == 0.125
    zero, negative_zero = _raw_output("float8_e5m2", b"\x00"), _raw_output("float8_e5m2", b"\x80")
    assert compare_call(zero, negative_zero).verdict is CallVerdict.SAME  # 0 == -0, as torch
    big = _raw_output("uint32", struct.pack("=I", 4_000_000_000))
    bigger = _raw_output("uint32", struct.pack("=I", 4_000_000_001))
    moved = compare_call(big, bigger)
    assert moved.verdict is CallVerdict.DIFFERENT_RESULT
    assert "1 of 1 element(s) beyond atol=0 + rtol=0" in moved.detail


def _sparse(values: list[float]) -> Replay:
    """A sparse output: its values dense, as float32."""
    tensor = {**_float_tensor(values), "layout": "torch.sparse_coo", "stride": None}
    tensor["data"] = {**tensor["data"], "dtype": "torch.float32"}
    return Replay.from_json({"status": "returned", "outputs": [tensor]})


def test_a_sparse_output_is_compared_by_its_values_not_its_metadata_alone() -> None:
    found = compare_call(_sparse([1.0, 0.0]), _sparse([1.0, 0.5]))
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    same = compare_call(_sparse([1.0, 0.0]), _sparse([1.0, 0.0]))
    assert (same.verdict, same.metadata_only) == (CallVerdict.SAME, None)


def _returned_many(*outputs: list[float]) -> Replay:
    line = {"status": "returned", "outputs": [_float_tensor(values) for values in outputs]}
    return Replay.from_json(line)


def test_a_change_in_an_output_the_control_does_not_vary_is_a_different_result() -> None:
    """The control varies output 0 only; the candidate changes output 1 as well, so its
    change is not within what the control shows (judged output by output, not by the
    first difference found)."""
    baseline = _returned_many([1.0], [10.0])
    control = _returned_many([1.5], [10.0])
    candidate = _returned_many([1.5], [50.0])
    found = compare_call(baseline, candidate, control)
    assert found.verdict is CallVerdict.DIFFERENT_RESULT
    assert found.detail.startswith("output 1: max relative difference 4 ")
    assert found.max_rel_err == 4.0


def _scalar_returned(value: Any, kind: str) -> Replay:
    line = {"status": "returned", "outputs": [{"t": "scalar", "v": value, "type": kind}]}
    return Replay.from_json(line)


def test_a_baseline_replay_that_returns_another_number_than_recorded_is_not_faithful() -> None:
    """``torch.equal`` or ``.item()`` replayed on other arguments: a Python value, not a
    tensor, so only its value shows the replay did something else."""
    recorded = {"status": "returned", "outputs": [{"t": "scalar", "v": True, "type": "bool"}]}
    other = _scalar_returned(False, "bool")
    found = compare_call(other, other, other, recorded=recorded)
    assert found.verdict is CallVerdict.NOT_FAITHFUL
    assert found.detail == (
        "replay not faithful: output 0: the value True when recorded, False in the baseline replay"
    )
    summed = {"status": "returned", "outputs": [{"t": "scalar", "v": 3.0, "type": "float"}]}
    reordered = _scalar_returned(3.0 + 1e-9, "float")  # another summation order
    assert compare_call(reordered, reordered, recorded=summed).verdict is CallVerdict.SAME
    address = {"status": "returned", "outputs": [{"t": "unchecked", "why": "an address"}]}
    elsewhere = _scalar_returned(140000000, "int")  # Tensor.data_ptr: the replay's own
    assert compare_call(elsewhere, elsewhere, recorded=address).verdict is CallVerdict.SAME


def _wrote(value: float | None) -> Replay:
    """An in-place op's replay: its argument 0 changed to ``value`` (None: left as it was)."""
    changed = []
    if value is not None:
        summed = {"sum": value, "abs": abs(value), "nonfinite": 0}
        changed = [{"arg": "0", **_float_tensor([value]), "fingerprint": summed}]
    return Replay.from_json({"status": "returned", "outputs": [{"t": "none"}], "mutated": changed})


def test_a_baseline_replay_that_writes_its_argument_otherwise_than_recorded_is_not_faithful() -> (
    None
):
    """``_foreach_add_`` returns nothing: the recording keeps what it wrote (its schema
    names the argument) before and after, and a replay that writes other values, or none,
    did not replay the user's call."""
    written = {
        "arg": "0",
        **_float_tensor([2.0]),
        "before": {"sum": 1.0, "abs": 1.0, "nonfinite": 0},
        "fingerprint": {"sum": 2.0, "abs": 2.0, "nonfinite": 0},
    }
    recorded = {"status": "returned", "outputs": [{"t": "none"}], "mutated": [written]}
    other = compare_call(_wrote(3.0), _wrote(3.0), recorded=recorded)
    assert other.verdict is CallVerdict.NOT_FAITHFUL
    assert other.detail == (
        "replay not faithful: argument 0 after the call: values sum to 2 when recorded, 3 in "
        "the baseline replay"
    )
    untouched = compare_call(_wrote(None), _wrote(None), recorded=recorded)
    assert untouched.verdict is CallVerdict.NOT_FAITHFUL
    assert untouched.detail == (
        "replay not faithful: argument 0 changed when recorded, unchanged in the baseline replay"
    )
    assert compare_call(_wrote(2.0), _wrote(2.0), recorded=recorded).verdict is CallVerdict.SAME


def test_an_output_known_only_by_its_type_is_counted_as_compared_by_metadata_only() -> None:
    """``Tensor.untyped_storage()`` returns a storage the replay encodes by its type alone:
    equal types say nothing of its values, so the call is "same" by metadata only, counted
    with why, never compared by value."""
    storage = {"t": "opaque", "type": "torch.storage.UntypedStorage"}
    line = {"status": "returned", "outputs": [storage]}
    found = compare_call(Replay.from_json(line), Replay.from_json(line))
    assert found.verdict is CallVerdict.SAME
    expected = "an output of type torch.storage.UntypedStorage, compared by its type only"
    assert found.metadata_only == expected
