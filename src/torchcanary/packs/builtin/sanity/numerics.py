"""Basic numerics hold: conv2d, matmul and linalg in several precisions against float64.

Every case runs in its precision on each device present and is compared with the same
inputs computed in float64 on the CPU; tolerances scale with the precision's epsilon.
A precision a device does not implement is recorded as unsupported, not as wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, refuted
from torchcanary.probe_result import Outcome

# Relative tolerance per precision: a few hundred ulps of the result magnitude.
_TOLERANCE = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-4, "float64": 1e-10}


def _cases(torch: Any) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...], tuple[str, ...]]]:
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    spd = rand(32, 32)
    spd = spd @ spd.T + 32 * torch.eye(32, dtype=torch.float64)
    floats = ("float16", "bfloat16", "float32", "float64")
    return {
        "conv2d": (torch.nn.functional.conv2d, (rand(2, 3, 16, 16), rand(8, 3, 3, 3)), floats),
        "matmul": (torch.matmul, (rand(64, 48), rand(48, 32)), floats),
        "linalg.solve": (torch.linalg.solve, (spd, rand(32, 4)), ("float32", "float64")),
        "linalg.cholesky": (torch.linalg.cholesky, (spd,), ("float32", "float64")),
        "linalg.eigvalsh": (torch.linalg.eigvalsh, (spd,), ("float32", "float64")),
    }


def _relative_error(actual: Any, expected: Any) -> float:
    difference = (actual.double().cpu() - expected).abs().max()
    return float(difference / expected.abs().max().clamp_min(1e-30))


def precisions_against_float64(ctx: ProbeContext) -> Outcome:
    """Claim: conv2d, matmul and linalg agree with a float64 reference in every precision.

    Decides by computing each case on each present device in fp16/bf16/fp32/fp64 (linalg:
    fp32/fp64) and comparing with float64 on the CPU within a per-precision tolerance.
    """
    import torch

    devices = [d for d in ctx.devices if d in ("cpu", "cuda", "xpu", "mps")] or ["cpu"]
    results: dict[str, Any] = {}
    wrong, unsupported = [], []
    for name, (fn, inputs, dtypes) in _cases(torch).items():
        expected = fn(*inputs)
        for device in devices:
            for dtype_name in dtypes:
                key = f"{name}/{device}/{dtype_name}"
                dtype = getattr(torch, dtype_name)
                try:
                    actual = fn(*(t.to(device=device, dtype=dtype) for t in inputs))
                except (RuntimeError, NotImplementedError, TypeError) as exc:
                    unsupported.append(key)
                    results[key] = f"unsupported: {str(exc)[:120]}"
                    continue
                error = _relative_error(actual, expected)
                results[key] = error
                if not error <= _TOLERANCE[dtype_name]:
                    wrong.append(f"{key} ({error:.2e})")
    evidence = {"relative_errors": results, "unsupported": unsupported, "tolerance": _TOLERANCE}
    if wrong:
        return refuted(f"{len(wrong)} case(s) off the float64 reference: {wrong[:4]}", **evidence)
    checked = len(results) - len(unsupported)
    return confirmed(
        f"{checked} case(s) within tolerance on {', '.join(devices)}"
        + (f"; {len(unsupported)} unsupported" if unsupported else ""),
        **evidence,
    )


PROBES = (
    Probe(
        id="sanity.numerics-vs-float64",
        claim="conv2d, matmul and linalg in fp16/bf16/fp32/fp64 agree with a float64 reference.",
        scope="every device present",
        run=precisions_against_float64,
        timeout_s=180,
    ),
)
