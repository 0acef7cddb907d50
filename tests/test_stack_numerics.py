"""Recorded tensors: decoding without torch, and the comparison against known values."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchcanary.numerics import DIR_VAR, record_stem
from torchcanary.numerics_diff import (
    compare_directories,
    decode,
    load_records,
)


def _write(
    directory: Path,
    name: str,
    dtype: str,
    shape: list[int],
    raw: bytes,
    byteorder: str = sys.byteorder,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stem = record_stem(name)
    (directory / f"{stem}.bin").write_bytes(raw)
    (directory / f"{stem}.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": name,
                "dtype": dtype,
                "shape": shape,
                "byteorder": byteorder,
                "nbytes": len(raw),
                "file": f"{stem}.bin",
            }
        )
    )


def _f32(*values: float) -> bytes:
    return struct.pack(f"={len(values)}f", *values)


def _next_f32(value: float) -> float:
    (bits,) = struct.unpack("=I", struct.pack("=f", value))
    return struct.unpack("=f", struct.pack("=I", bits + 1))[0]


def _compare(tmp_path: Path, dtype: str, base: bytes, cand: bytes, shape: list[int], **tolerances):
    _write(tmp_path / "b", "t", dtype, shape, base)
    _write(tmp_path / "c", "t", dtype, shape, cand)
    (comparison,) = compare_directories(tmp_path / "b", tmp_path / "c", **tolerances)
    return comparison


def test_one_ulp_in_float32_is_within_default_tolerance_but_drift_at_zero_ulps(tmp_path):
    base = _f32(1.0, 2.0, float("nan"), float("inf"))
    cand = _f32(1.0, _next_f32(2.0), float("nan"), float("inf"))
    default = _compare(tmp_path, "float32", base, cand, [4])
    assert not default.drift
    assert default.max_ulps == 1
    assert default.max_abs_err == pytest.approx(2.0**-22)
    assert default.max_rel_err == pytest.approx(2.0**-23)
    assert default.nan == (1, 1) and default.inf == (1, 1)
    strict = _compare(tmp_path / "strict", "float32", base, cand, [4], max_ulps=0)
    assert strict.drift and "1 ULPs apart" in strict.reason
    assert strict.worst_index == 1


def test_bfloat16_and_float16_decode_to_their_exact_values(tmp_path):
    # bfloat16 1.0 is 0x3F80 and the next value up, 1.0078125, is 0x3F81.
    _write(tmp_path, "bf", "bfloat16", [2], struct.pack("=2H", 0x3F80, 0x3F81))
    _write(tmp_path, "half", "float16", [2], struct.pack("<2e", 0.5, -65504.0), "little")
    records = load_records(tmp_path)
    assert decode(records["bf"]) == [1.0, 1.0078125]
    assert decode(records["half"]) == [0.5, -65504.0]


def test_bfloat16_one_step_counts_one_ulp_and_breaks_a_tight_rtol(tmp_path):
    comparison = _compare(
        tmp_path,
        "bfloat16",
        struct.pack("=H", 0x3F80),
        struct.pack("=H", 0x3F81),
        [1],
        rtol=1e-3,
        atol=0.0,
    )
    assert comparison.max_ulps == 1
    assert comparison.drift and comparison.beyond_tolerance == 1


def test_ulps_are_counted_across_zero_and_signed_zeros_are_equal(tmp_path):
    tiny = struct.unpack("=f", struct.pack("=I", 1))[0]
    comparison = _compare(tmp_path, "float32", _f32(0.0, -tiny), _f32(-0.0, tiny), [2])
    assert comparison.max_ulps == 2  # -tiny, -0/+0, +tiny


def test_a_nan_that_appears_is_drift_even_with_huge_tolerances(tmp_path):
    comparison = _compare(
        tmp_path,
        "float64",
        struct.pack("=2d", 1.0, 2.0),
        struct.pack("=2d", 1.0, math.nan),
        [2],
        rtol=1e9,
        atol=1e9,
    )
    assert comparison.drift
    assert comparison.nan == (0, 1)
    assert "NaN/Inf" in comparison.reason


def test_integers_compare_exactly_and_big_endian_records_are_swapped(tmp_path):
    _write(tmp_path / "b", "ids", "int64", [3], struct.pack(">3q", 1, -5, 7), "big")
    _write(tmp_path / "c", "ids", "int64", [3], struct.pack("<3q", 1, -5, 8), "little")
    assert decode(load_records(tmp_path / "b")["ids"]) == [1, -5, 7]
    (comparison,) = compare_directories(tmp_path / "b", tmp_path / "c")
    assert comparison.drift and comparison.max_abs_err == 1 and comparison.beyond_tolerance == 1


def test_shape_change_and_one_sided_names_are_drift(tmp_path):
    _write(tmp_path / "b", "logits", "float32", [2, 2], _f32(1, 2, 3, 4))
    _write(tmp_path / "c", "logits", "float32", [4], _f32(1, 2, 3, 4))
    _write(tmp_path / "b", "only-before", "float32", [1], _f32(1))
    _write(tmp_path / "c", "only-after", "float32", [1], _f32(1))
    by_name = {c.name: c for c in compare_directories(tmp_path / "b", tmp_path / "c")}
    assert "float32[2, 2] to float32[4]" in by_name["logits"].reason
    assert by_name["only-before"].reason == "recorded only in the baseline"
    assert by_name["only-after"].reason == "recorded only in the candidate"
    assert all(c.drift for c in by_name.values())


def test_a_record_cut_short_is_ignored(tmp_path):
    (tmp_path / "broken.json").write_text('{"name": "x", "dty')
    assert load_records(tmp_path) == {}


@pytest.mark.torch_envs
def test_record_writes_tensors_that_decode_to_torch_own_values(tmp_path, baseline_env, import_root):
    script = textwrap.dedent("""
        import json, os, sys, warnings
        import torch
        from torchcanary import numerics
        values = {}
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
        numerics.record("strided", x.T)                  # not contiguous
        numerics.record("bf16", (x * 3).bfloat16())
        numerics.record("ids", torch.tensor([-3, 2**40]))
        numerics.record("flags", torch.tensor([True, False]))
        values["strided"] = x.T.flatten().tolist()
        values["bf16"] = (x * 3).bfloat16().float().flatten().tolist()
        try:
            numerics.record("complex", torch.ones(2, dtype=torch.complex64))
        except TypeError as exc:
            values["complex_error"] = str(exc)
        del os.environ[numerics.DIR_VAR]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            numerics.record("ignored", x)
            numerics.record("ignored", x)
        values["warnings"] = [str(w.message) for w in caught]
        print(json.dumps(values))
    """)
    out = subprocess.run(
        [baseline_env.python, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(import_root), DIR_VAR: str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout.strip().splitlines()[-1])
    records = load_records(tmp_path)
    assert set(records) == {"strided", "bf16", "ids", "flags"}
    assert records["strided"].shape == (4, 3)
    assert decode(records["strided"]) == pytest.approx(expected["strided"], abs=0)
    assert decode(records["bf16"]) == expected["bf16"]
    assert decode(records["ids"]) == [-3, 2**40]
    assert decode(records["flags"]) == [1, 0]
    assert "cannot store complex64" in expected["complex_error"]
    assert len(expected["warnings"]) == 1 and DIR_VAR in expected["warnings"][0]
