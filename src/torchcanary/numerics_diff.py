"""Compares the tensors a user's code recorded in each environment, without importing torch.

``torchcanary.numerics.record`` leaves raw bytes plus a JSON description; here they are
decoded with ``array``/``struct`` and compared element by element, the baseline as the
reference: max absolute and relative error, the largest distance in units in the last place
(ULPs, counted in the recorded dtype), NaN and Inf counts, and how many elements fall outside
``atol + rtol * |baseline|`` (the rule of ``torch.testing.assert_close``, whose per-dtype
default tolerances are used unless the settings give others). A name whose shape or dtype
changed, whose NaN/Inf pattern changed, that exceeds the tolerance or an optional ULP limit,
or that was recorded in only one environment, is numeric drift.
"""

from __future__ import annotations

import array
import json
import math
import struct
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# (rtol, atol) per dtype, as torch.testing.assert_close defaults them; integers, and the
# float8 types it has no tolerance for, are exact.
DEFAULT_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}
# float8 formats: (exponent bits, mantissa bits, exponent bias, how its NaN and Inf are
# spelled: "ieee" (all-ones exponent), "fn" (all ones, no Inf), "fnuz" (the negative zero's
# pattern, no Inf), "e8m0" (exponent only, no sign; all ones is NaN))
_FLOAT8 = {
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
    "float8_e8m0fnu": (8, 0, 127, "e8m0"),
}
FLOAT_BITS = {"float64": 64, "float32": 32, "float16": 16, "bfloat16": 16}
FLOAT_BITS.update(dict.fromkeys(_FLOAT8, 8))
_UNSIGNED_CODE = {64: "Q", 32: "I", 16: "H", 8: "B"}


def _float8_value(byte: int, exponent_bits: int, mantissa_bits: int, bias: int, kind: str) -> float:
    """The value one float8 byte spells."""
    if kind == "e8m0":
        return math.nan if byte == 0xFF else 2.0 ** (byte - bias)
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    top = (1 << exponent_bits) - 1
    if kind == "fnuz" and byte == 0x80:
        return math.nan
    if kind == "fn" and exponent == top and mantissa == (1 << mantissa_bits) - 1:
        return math.nan
    if kind == "ieee" and exponent == top:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:  # subnormal
        return sign * mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


_FLOAT8_VALUES = {
    name: [_float8_value(byte, *spec) for byte in range(256)] for name, spec in _FLOAT8.items()
}


def _typecode(kind: str, itemsize: int) -> str:
    """The ``array`` type code for an integer of ``itemsize`` bytes on this platform."""
    codes = "bhilq" if kind == "signed" else "BHILQ"
    return next(code for code in codes if array.array(code).itemsize == itemsize)


INT_CODES = {
    "int64": _typecode("signed", 8),
    "int32": _typecode("signed", 4),
    "int16": _typecode("signed", 2),
    "int8": "b",
    "uint64": _typecode("unsigned", 8),
    "uint32": _typecode("unsigned", 4),
    "uint16": _typecode("unsigned", 2),
    "uint8": "B",
    "bool": "B",
}
DECODABLE = frozenset(FLOAT_BITS) | frozenset(INT_CODES)  # the dtypes compared by value


@dataclass(frozen=True)
class TensorRecord:
    """One recorded tensor: its values in a file on disk (a workload's or a test's record),
    or already in memory (a replayed call's output, carried in its JSON line)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    byteorder: str
    source: Path | bytes

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    def raw(self) -> bytes:
        return self.source if isinstance(self.source, bytes) else self.source.read_bytes()


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    max_ulps: int | None = None


@dataclass(frozen=True)
class NumericComparison:
    """What comparing one name across the environments found; ``drift`` decides the verdict."""

    name: str
    drift: bool
    reason: str
    dtype: str = ""
    shape: list[int] = field(default_factory=list)
    count: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulps: int = 0
    beyond_tolerance: int = 0
    nan: tuple[int, int] = (0, 0)
    inf: tuple[int, int] = (0, 0)
    worst_index: int | None = None
    worst_values: tuple[float, float] | None = None
    tolerance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("max_abs_err", "max_rel_err"):
            if math.isinf(data[key]):
                data[key] = "inf"  # JSON has no infinity
        return data


def load_records(directory: Path) -> dict[str, TensorRecord]:
    """Every complete record in ``directory`` by name (a missing directory holds none)."""
    records: dict[str, TensorRecord] = {}
    if not directory.is_dir():
        return records
    for meta_path in sorted(directory.glob("*.json")):
        try:
            meta = json.loads(meta_path.read_text())
            records[meta["name"]] = TensorRecord(
                meta["name"],
                meta["dtype"],
                tuple(int(n) for n in meta["shape"]),
                meta.get("byteorder", sys.byteorder),
                directory / meta["file"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record cut short when its process was killed
    return records


def decode(record: TensorRecord) -> list[float] | list[int]:
    """The values of ``record`` in C order, as Python floats or ints."""
    raw = record.raw()
    swap = record.byteorder != sys.byteorder
    if record.dtype in _FLOAT8_VALUES:
        table = _FLOAT8_VALUES[record.dtype]
        return [table[byte] for byte in raw]
    if record.dtype == "float16":
        prefix = "<" if record.byteorder == "little" else ">"
        return list(struct.unpack(f"{prefix}{len(raw) // 2}e", raw))
    if record.dtype == "bfloat16":
        halves = array.array("H", raw)
        if swap:
            halves.byteswap()
        # bfloat16 is the top half of a float32: shift it into place and reinterpret.
        widened = array.array(_UNSIGNED_CODE[32], (h << 16 for h in halves))
        return array.array("f", widened.tobytes()).tolist()
    code = {"float64": "d", "float32": "f"}.get(record.dtype) or INT_CODES[record.dtype]
    values = array.array(code, raw)
    if swap:
        values.byteswap()
    return values.tolist()


def ordered_bits(record: TensorRecord) -> list[int]:
    """Float bit patterns mapped to integers whose difference counts ULPs (+0 and -0 meet)."""
    bits = FLOAT_BITS[record.dtype]
    patterns = array.array(_UNSIGNED_CODE[bits], record.raw())
    if record.byteorder != sys.byteorder:
        patterns.byteswap()
    if _FLOAT8.get(record.dtype, (0, 0, 0, ""))[3] == "e8m0":
        return list(patterns)  # no sign bit: the patterns are in order already
    sign = 1 << (bits - 1)
    return [-(p & (sign - 1)) if p & sign else p for p in patterns]


def tolerance_for(
    dtype: str, rtol: float | None, atol: float | None, max_ulps: int | None
) -> Tolerance:
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return Tolerance(
        default_rtol if rtol is None else rtol, default_atol if atol is None else atol, max_ulps
    )


def compare(
    baseline: TensorRecord, candidate: TensorRecord, tolerance: Tolerance
) -> NumericComparison:
    """Compare one name's two records, the baseline's values as the reference."""
    common: dict[str, Any] = {
        "dtype": candidate.dtype,
        "shape": list(candidate.shape),
        "count": candidate.count,
        "tolerance": asdict(tolerance),
    }
    if baseline.dtype != candidate.dtype or baseline.shape != candidate.shape:
        return NumericComparison(
            baseline.name,
            True,
            f"changed from {baseline.dtype}{list(baseline.shape)} to "
            f"{candidate.dtype}{list(candidate.shape)}",
            **common,
        )
    base_values, cand_values = decode(baseline), decode(candidate)
    is_float = baseline.dtype in FLOAT_BITS
    if is_float:
        base_ordered, cand_ordered = ordered_bits(baseline), ordered_bits(candidate)
    else:
        base_ordered, cand_ordered = base_values, cand_values  # type: ignore[assignment]
    found = _differences(base_values, cand_values, base_ordered, cand_ordered, tolerance)
    reasons = _reasons(found, tolerance, candidate.count)
    if reasons:
        reason = "; ".join(reasons)
    elif found.max_abs == 0 and not found.pattern_changes:
        reason = "bitwise identical" if is_float else "identical"
    else:
        reason = f"within tolerance (max abs error {found.max_abs:.3g}, {found.max_ulps} ULPs)"
    worst, worst_values = found.worst, None
    if worst is not None:
        worst_values = (float(base_values[worst]), float(cand_values[worst]))
    return NumericComparison(
        baseline.name,
        bool(reasons),
        reason,
        max_abs_err=found.max_abs,
        max_rel_err=found.max_rel,
        max_ulps=found.max_ulps,
        beyond_tolerance=found.beyond,
        nan=(found.nan[0], found.nan[1]),
        inf=(found.inf[0], found.inf[1]),
        worst_index=worst,
        worst_values=worst_values,
        **common,
    )


@dataclass
class _Differences:
    """What a walk over two records' elements found; NaN and Inf are counted per side."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulps: int = 0
    beyond: int = 0
    pattern_changes: int = 0
    worst: int | None = None
    worst_excess: float = -math.inf
    nan: list[int] = field(default_factory=lambda: [0, 0])
    inf: list[int] = field(default_factory=lambda: [0, 0])


def _differences(
    base_values: list[float] | list[int],
    cand_values: list[float] | list[int],
    base_ordered: list[int],
    cand_ordered: list[int],
    tolerance: Tolerance,
) -> _Differences:
    """Errors element by element; the worst element is the one furthest beyond tolerance
    (a changed NaN/Inf status first of all)."""
    found = _Differences()
    for index, (ref, value) in enumerate(zip(base_values, cand_values, strict=True)):
        ref_nan, value_nan = ref != ref, value != value
        found.nan[0] += ref_nan
        found.nan[1] += value_nan
        ref_inf = not ref_nan and math.isinf(ref)
        value_inf = not value_nan and math.isinf(value)
        found.inf[0] += ref_inf
        found.inf[1] += value_inf
        if ref_nan or value_nan or ref_inf or value_inf:
            if ref_nan != value_nan or ((ref_inf or value_inf) and ref != value):
                found.pattern_changes += 1
                if found.worst_excess < math.inf:
                    found.worst, found.worst_excess = index, math.inf
            continue
        error = abs(value - ref)
        found.max_abs = max(found.max_abs, error)
        if ref != 0:
            found.max_rel = max(found.max_rel, error / abs(ref))
        elif error:
            found.max_rel = math.inf
        found.max_ulps = max(found.max_ulps, abs(cand_ordered[index] - base_ordered[index]))
        excess = error - (tolerance.atol + tolerance.rtol * abs(ref))
        if excess > 0:
            found.beyond += 1
        if error and excess > found.worst_excess:
            found.worst, found.worst_excess = index, excess
    return found


def _reasons(found: _Differences, tolerance: Tolerance, count: int) -> list[str]:
    """Why the records differ beyond tolerance; empty when they do not."""
    reasons = []
    if found.pattern_changes:
        reasons.append(
            f"{found.pattern_changes} element(s) changed NaN/Inf status "
            f"(NaN {found.nan[0]} -> {found.nan[1]}, Inf {found.inf[0]} -> {found.inf[1]})"
        )
    if found.beyond:
        reasons.append(
            f"{found.beyond} of {count} element(s) beyond "
            f"atol={tolerance.atol:g} + rtol={tolerance.rtol:g}"
        )
    if tolerance.max_ulps is not None and found.max_ulps > tolerance.max_ulps:
        reasons.append(f"{found.max_ulps} ULPs apart, limit {tolerance.max_ulps}")
    return reasons


def compare_directories(
    baseline_dir: Path,
    candidate_dir: Path,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    max_ulps: int | None = None,
) -> list[NumericComparison]:
    """One comparison per name recorded in either environment, sorted by name."""
    base_records, cand_records = load_records(baseline_dir), load_records(candidate_dir)
    comparisons = []
    for name in sorted(set(base_records) | set(cand_records)):
        if name not in cand_records:
            comparisons.append(NumericComparison(name, True, "recorded only in the baseline"))
        elif name not in base_records:
            comparisons.append(NumericComparison(name, True, "recorded only in the candidate"))
        else:
            tolerance = tolerance_for(base_records[name].dtype, rtol, atol, max_ulps)
            comparisons.append(compare(base_records[name], cand_records[name], tolerance))
    return comparisons
