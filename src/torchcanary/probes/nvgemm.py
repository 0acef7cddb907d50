"""NVGEMM (CuTeDSL / cutlass.operators GEMMs) as an Inductor autotuning backend.

Every facet needs an NVIDIA GPU and the ``cutlass.operators`` package; without them each
probe is not checkable and shows, as information, what Inductor says about the name on
this machine (whether the backend list accepts it, whether its codegen imports). With
them, a function is compiled with ``max_autotune_gemm_backends="NVGEMM"`` and decided by
two things: the generated wrapper calls ``_nvgemm_run`` (NVGEMM really was chosen), and
the result matches a float64 reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome, Verdict
from torchcanary.probes._support import compiled_with_code, max_abs_error

_NVGEMM_CALL = "_nvgemm_run("
# Values of the eight non-negative e2m1 codes; codes 8-15 are their negatives.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _inductor_view_of_nvgemm() -> dict[str, Any]:
    """What Inductor says about NVGEMM here, without a GPU: information, never a verdict."""
    import importlib

    from torch._inductor import config as inductor_config
    from torch._inductor import utils as inductor_utils

    facts: dict[str, Any] = {"default_gemm_backends": inductor_config.max_autotune_gemm_backends}
    accepts = getattr(inductor_utils, "_use_autotune_backend", None)
    if accepts is not None:
        with inductor_config.patch(max_autotune_gemm_backends="ATEN,NVGEMM"):
            facts["backend_list_accepts_nvgemm"] = bool(accepts("NVGEMM"))
    available = getattr(inductor_utils, "ensure_nv_universal_gemm_available", None)
    facts["cutlass_operators_importable"] = bool(available()) if available else None
    try:
        importlib.import_module("torch._inductor.codegen.nv_universal_gemm")
        facts["nvgemm_codegen_module"] = "imports"
    except Exception as exc:
        facts["nvgemm_codegen_module"] = f"{type(exc).__name__}: {exc}"[:200]
    return facts


def _gate(min_capability: tuple[int, int], what: str) -> Outcome | None:
    """Not-checkable outcome when this machine cannot run the facet, else None."""
    import torch

    info = _inductor_view_of_nvgemm()
    if not torch.cuda.is_available():
        return not_checkable(f"not checked: {what} needs an NVIDIA GPU (CUDA)", inductor=info)
    capability = torch.cuda.get_device_capability()
    if capability < min_capability:
        return not_checkable(
            f"not checked: {what} needs compute capability "
            f"{min_capability[0]}.{min_capability[1]}+, this GPU is "
            f"{capability[0]}.{capability[1]}",
            inductor=info,
        )
    if not info.get("cutlass_operators_importable"):
        return not_checkable(
            f"not checked: {what} needs the cutlass.operators package (nvidia-cutlass-dsl)",
            inductor=info,
        )
    return None


def _compile_with_nvgemm(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    from torch._inductor import config as inductor_config

    with inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="NVGEMM"):
        return compiled_with_code(fn, *args)


def _decide(what: str, output: Any, reference: Any, code: str, **evidence: Any) -> Outcome:
    """NVGEMM must be in the code, and the error relative to the largest reference value
    within bf16 output rounding (2e-2)."""
    tolerance = 2e-2
    scale = max(1.0, float(reference.abs().max().item()))
    error = max_abs_error(output, reference) / scale
    used = _NVGEMM_CALL in code
    evidence.update(
        relative_error=error,
        tolerance=tolerance,
        nvgemm_in_code=used,
        triton_kernels_in_code=code.count("async_compile.triton("),
    )
    if not used:
        return refuted(f"{what}: Inductor did not choose NVGEMM when asked for it only", **evidence)
    if error > tolerance:
        return refuted(f"{what}: NVGEMM result is off by {error:.3g}", **evidence)
    return confirmed(f"{what}: NVGEMM kernel in the generated code, error {error:.3g}", **evidence)


def run_backend_choice(context: ProbeContext) -> Outcome:
    """Claim: NVGEMM is an autotuning backend Inductor uses when named in
    ``max_autotune_gemm_backends``.

    Decides by compiling a bf16 1024-square matmul with only NVGEMM allowed: the wrapper
    must call an NVGEMM kernel and match the float64 product.
    """
    gated = _gate((9, 0), "NVGEMM autotuning")
    if gated:
        return gated
    import torch

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    output, code = _compile_with_nvgemm(lambda x, y: x @ y, a, b)
    return _decide("plain GEMM", output, a.double() @ b.double(), code)


def run_epilogue_fusion(context: ProbeContext) -> Outcome:
    """Claim: NVGEMM fuses pointwise epilogues into the GEMM kernel.

    Decides by compiling ``relu(a @ b) * 2 + 1``: NVGEMM must be chosen, no separate
    Triton kernel may remain for the epilogue, and the result must match float64.
    """
    gated = _gate((10, 0), "NVGEMM epilogue fusion (EFC kernels)")
    if gated:
        return gated
    import torch

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    output, code = _compile_with_nvgemm(lambda x, y: torch.relu(x @ y) * 2 + 1, a, b)
    outcome = _decide(
        "GEMM with epilogue", output, torch.relu(a.double() @ b.double()) * 2 + 1, code
    )
    if outcome.evidence.get("triton_kernels_in_code"):
        return refuted(
            "the epilogue ran as a separate Triton kernel, not fused into NVGEMM",
            **outcome.evidence,
        )
    return outcome


def _e2m1_operand(rows: int, cols: int) -> tuple[Any, Any]:
    """Packed NVFP4 data whose two nibbles per byte are equal (so packing order cannot
    matter), and its exact decoded float64 matrix."""
    import torch

    codes = torch.randint(0, 16, (rows, cols // 2), dtype=torch.uint8)
    table = torch.tensor(_E2M1_VALUES + tuple(-v for v in _E2M1_VALUES), dtype=torch.float64)
    packed = (codes | (codes << 4)).view(torch.float4_e2m1fn_x2)
    decoded = table[codes.long()].repeat_interleave(2, dim=1)
    return packed.cuda(), decoded


def run_scaled(context: ProbeContext) -> Outcome:
    """Claim: NVGEMM covers scaled GEMMs, fp8 and NVFP4.

    Decides with ``F.scaled_mm`` compiled under NVGEMM: fp8 e4m3 tensorwise (sm90+) and,
    on sm100+, NVFP4 with 1x16 block scales of 1.0 on data whose exact values are known;
    both must select NVGEMM and match the float64 product of the decoded operands.
    """
    gated = _gate((9, 0), "NVGEMM scaled GEMM")
    if gated:
        return gated
    import torch
    import torch.nn.functional as F

    m = n = k = 256
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")

    def fp8(x: Any, y: Any) -> Any:
        return F.scaled_mm(
            x,
            y.t(),
            one,
            F.ScalingType.TensorWise,
            one,
            F.ScalingType.TensorWise,
            output_dtype=torch.bfloat16,
        )

    output, code = _compile_with_nvgemm(fp8, a, b)
    fp8_outcome = _decide("fp8 scaled GEMM", output, a.double() @ b.double().t(), code)
    if fp8_outcome.verdict is not Verdict.CONFIRMED or torch.cuda.get_device_capability() < (10, 0):
        return fp8_outcome
    a4, a_ref = _e2m1_operand(m, k)
    b4, b_ref = _e2m1_operand(n, k)
    scale = torch.ones(m, k // 16, device="cuda").to(torch.float8_e4m3fn)
    swizzle = F.SwizzleType.SWIZZLE_32_4_4

    def nvfp4(x: Any, y: Any) -> Any:
        return F.scaled_mm(
            x,
            y.t(),
            scale,
            F.ScalingType.BlockWise1x16,
            scale,
            F.ScalingType.BlockWise1x16,
            swizzle_a=swizzle,
            swizzle_b=swizzle,
            output_dtype=torch.bfloat16,
        )

    output, code = _compile_with_nvgemm(nvfp4, a4, b4)
    return _decide(
        "NVFP4 scaled GEMM (after fp8 passed)",
        output,
        a_ref @ b_ref.t(),
        code,
        fp8=fp8_outcome.evidence,
    )


def run_grouped_reduction(context: ProbeContext) -> Outcome:
    """Claim: NVGEMM can carry grouped-reduction epilogues (e.g. per-16-column amax).

    Decides by compiling a GEMM that also returns ``abs().amax`` over groups of 16 output
    columns: NVGEMM must be chosen, no separate Triton reduction may remain, and both
    outputs must match float64.
    """
    gated = _gate((10, 0), "NVGEMM grouped-reduction epilogues")
    if gated:
        return gated
    import torch

    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)

    def gemm_and_group_amax(x: Any, y: Any) -> Any:
        out = x @ y
        return torch.cat([out.flatten(), out.view(512, 32, 16).abs().amax(-1).flatten()])

    reference = a.double() @ b.double()
    expected = torch.cat(
        [reference.flatten(), reference.view(512, 32, 16).abs().amax(-1).flatten()]
    )
    output, code = _compile_with_nvgemm(gemm_and_group_amax, a, b)
    outcome = _decide("GEMM with grouped amax", output, expected, code)
    if outcome.evidence.get("triton_kernels_in_code"):
        return refuted("the grouped reduction ran as a separate Triton kernel", **outcome.evidence)
    return outcome


_RELEASE = (
    "NVGEMM: CuTeDSL-generated CUTLASS kernels with epilogue fusion, scaled and "
    "NVFP4 GEMM, and grouped-reduction epilogues autotuned alongside Triton and ATen"
)

PROBES = (
    Probe(
        id="nvgemm.autotune-backend",
        claim="Naming NVGEMM in max_autotune_gemm_backends makes Inductor generate NVGEMM "
        "GEMM kernels that compute correctly.",
        release_claim=_RELEASE,
        scope="cuda",
        run=run_backend_choice,
        timeout_s=600,
    ),
    Probe(
        id="nvgemm.epilogue-fusion",
        claim="NVGEMM fuses pointwise epilogues into the GEMM kernel.",
        release_claim=_RELEASE,
        scope="cuda (sm100+)",
        run=run_epilogue_fusion,
        timeout_s=600,
    ),
    Probe(
        id="nvgemm.scaled-fp8-nvfp4",
        claim="NVGEMM handles scaled GEMMs: fp8 tensorwise and NVFP4 block-scaled.",
        release_claim=_RELEASE,
        scope="cuda (sm90+, NVFP4 sm100+)",
        run=run_scaled,
        timeout_s=600,
    ),
    Probe(
        id="nvgemm.grouped-reduction",
        claim="NVGEMM computes grouped-reduction epilogues inside the GEMM.",
        release_claim=_RELEASE,
        scope="cuda (sm100+)",
        run=run_grouped_reduction,
        timeout_s=600,
    ),
)
