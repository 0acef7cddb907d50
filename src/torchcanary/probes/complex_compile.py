"""Experimental, opt-in decomposition of complex-valued ops under torch.compile.

The opt-in is ``torch._functorch.config.enable_complex_wrapper`` (the only complex switch
in the compile stack's configs). Without it, Inductor hands complex ops to ATen; with it,
complex tensors are split into real and imaginary parts (``view_as_real``) and compiled
as real arithmetic. The probe compiles several complex functions with the switch on and
compares each with eager; failures to compile are the "gaps" the release warns of and are
listed, while a compiled result that is wrong refutes the claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, absent, confirmed, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import compiled_with_code, lookup, max_abs_error

_FLAG_MODULE = "torch._functorch.config"
_FLAG = "enable_complex_wrapper"
_TOLERANCE = 1e-4  # relative, complex64


def _cases() -> dict[str, Callable[[Any, Any], Any]]:
    import torch

    return {
        "exp_times_conj": lambda z, w: torch.exp(z) * w.conj(),
        "matmul": lambda z, w: z @ w,
        "abs_plus_angle": lambda z, w: z.abs() + z.angle(),
        "sum_of_product": lambda z, w: (z * w).sum(),
        "mul_then_add": lambda z, w: z * w + z,
    }


def _compile_case(fn: Callable[[Any, Any], Any], z: Any, w: Any, enabled: bool) -> dict[str, Any]:
    from torch._functorch import config as functorch_config

    expected = fn(z, w)
    try:
        with functorch_config.patch({_FLAG: enabled}):
            output, code = compiled_with_code(fn, z, w, fullgraph=True)
    except Exception as exc:  # a gap: the decomposition does not cover this function
        first = str(exc).strip().splitlines()
        return {"compiled": False, "error": f"{type(exc).__name__}: {' | '.join(first[:2])}"[:300]}
    scale = max(1.0, float(expected.abs().max().item()))
    return {
        "compiled": True,
        "relative_error": max_abs_error(output, expected) / scale,
        "decomposed": "view_as_real" in code,
    }


def run_complex_compile(context: ProbeContext) -> Outcome:
    """Claim: complex-valued torch.compile can opt in to an experimental decomposition
    into real arithmetic.

    Decides with five complex64 functions compiled with the switch on: the switch must
    exist and default to off, at least one function must compile to decomposed code
    (``view_as_real``, which the switch-off compile of the same function lacks), and
    every function that compiles must match eager within 1e-4; functions that fail to
    compile are reported as gaps.
    """
    import torch

    config = lookup(_FLAG_MODULE)
    if config is None or not hasattr(config, _FLAG):
        return absent(f"no {_FLAG_MODULE}.{_FLAG} opt-in for complex decomposition")
    default_value = bool(getattr(config, _FLAG))
    generator = torch.Generator().manual_seed(8)
    z = torch.randn(8, 8, dtype=torch.complex64, generator=generator)
    w = torch.randn(8, 8, dtype=torch.complex64, generator=generator)
    cases = _cases()
    enabled = {name: _compile_case(fn, z, w, True) for name, fn in cases.items()}
    control = _compile_case(cases["exp_times_conj"], z, w, False)
    evidence = {
        "default_value": default_value,
        "enabled": enabled,
        "control_without_opt_in": control,
    }
    compiled = {n: r for n, r in enabled.items() if r["compiled"]}
    gaps = sorted(set(enabled) - set(compiled))
    wrong = [n for n, r in compiled.items() if r["relative_error"] > _TOLERANCE]
    decomposed = [n for n, r in compiled.items() if r["decomposed"]]
    if default_value:
        return refuted(f"{_FLAG} is on by default, not opt-in", **evidence)
    if wrong:
        return refuted(f"decomposed complex compile gives wrong results for {wrong}", **evidence)
    if not decomposed or control.get("decomposed"):
        return refuted("the opt-in does not change how complex ops are compiled", **evidence)
    return confirmed(
        f"opt-in decomposes {len(decomposed)}/{len(cases)} functions into real "
        f"ops matching eager; gaps: {', '.join(gaps) or 'none'}",
        gaps=gaps,
        **evidence,
    )


PROBES = (
    Probe(
        id="compile.complex-decomposition-opt-in",
        claim="torch.compile has an off-by-default switch that decomposes complex-valued "
        "ops into real arithmetic, with correct results where it applies.",
        release_claim="Experimental complex compile: Opt-in decomposition of "
        "complex-valued torch.compile ops is marked experimental",
        scope="any",
        run=run_complex_compile,
        timeout_s=240,
    ),
)
