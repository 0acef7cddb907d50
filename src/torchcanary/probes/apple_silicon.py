"""Apple-Silicon (MPS) linear algebra and reductions, checked against float64 on the CPU.

A claim about the MPS backend can only be decided on an MPS device. Elsewhere these probes
are not checkable, and they still run the same checks on the CPU in float32 so the report
shows what the comparison measures (labelled as information, not as the claim's verdict).
On MPS an op that raises NotImplementedError or warns that it falls back to the CPU is not
native, which refutes the claim for that op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import max_abs_error, quietly

_LINALG_TOLERANCE = 2e-3  # relative, float32 on well-conditioned 96x96 matrices
_REDUCTION_TOLERANCE = 1e-3  # relative to the reference's magnitude


def _relative(actual: Any, expected: Any) -> float:
    scale = max(1.0, float(expected.abs().max().item()))
    return max_abs_error(actual, expected) / scale


def _linalg_errors(device: str) -> dict[str, dict[str, Any]]:
    """Each decomposition's reconstruction error (and value error) against float64."""
    import torch

    generator = torch.Generator().manual_seed(7)
    general = torch.randn(96, 96, generator=generator, dtype=torch.float64)
    spd = general @ general.T + 96 * torch.eye(96, dtype=torch.float64)
    symmetric = (general + general.T) / 2

    def svd() -> dict[str, float]:
        u, s, vh = torch.linalg.svd(general.float().to(device))
        rebuilt = (u.cpu().double() * s.cpu().double()) @ vh.cpu().double()
        return {
            "reconstruction": _relative(rebuilt, general),
            "values": _relative(s.cpu(), torch.linalg.svdvals(general)),
        }

    def eigh() -> dict[str, float]:
        w, v = torch.linalg.eigh(symmetric.float().to(device))
        w64, v64 = w.cpu().double(), v.cpu().double()
        return {
            "reconstruction": _relative(v64 @ torch.diag(w64) @ v64.T, symmetric),
            "values": _relative(w64, torch.linalg.eigvalsh(symmetric)),
        }

    def qr() -> dict[str, float]:
        q, r = torch.linalg.qr(general.float().to(device))
        q64, r64 = q.cpu().double(), r.cpu().double()
        return {
            "reconstruction": _relative(q64 @ r64, general),
            "orthogonality": _relative(q64.T @ q64, torch.eye(96, dtype=torch.float64)),
        }

    def cholesky() -> dict[str, float]:
        lower = torch.linalg.cholesky(spd.float().to(device)).cpu().double()
        return {
            "reconstruction": _relative(lower @ lower.T, spd),
            "factor": _relative(lower, torch.linalg.cholesky(spd)),
        }

    return {
        name: _checked(fn)
        for name, fn in (("svd", svd), ("eigh", eigh), ("qr", qr), ("cholesky", cholesky))
    }


def _checked(fn: Callable[[], dict[str, float]]) -> dict[str, Any]:
    """Run one check, keeping its errors, any CPU-fallback warning, or the exception text."""
    try:
        errors, caught = quietly(fn)
    except Exception as exc:
        return {"raised": f"{type(exc).__name__}: {exc}"[:300]}
    fallback = [w for w in caught if "fall back" in w.lower() or "fallback" in w.lower()]
    return {"errors": errors, "cpu_fallback_warnings": fallback}


def _verdict(results: dict[str, dict[str, Any]], tolerance: float, what: str) -> Outcome:
    broken = {n: r["raised"] for n, r in results.items() if "raised" in r}
    fallback = [n for n, r in results.items() if r.get("cpu_fallback_warnings")]
    inaccurate = [
        n for n, r in results.items() if "errors" in r and max(r["errors"].values()) > tolerance
    ]
    if broken or fallback or inaccurate:
        return refuted(
            f"{what} on MPS: raised {sorted(broken)}, CPU fallback {fallback}, "
            f"inaccurate {inaccurate}",
            results=results,
            tolerance=tolerance,
        )
    return confirmed(
        f"{what} ran natively on MPS within {tolerance:g} of float64",
        results=results,
        tolerance=tolerance,
    )


def run_linalg(context: ProbeContext) -> Outcome:
    """Claim: SVD, eigh, QR and Cholesky run natively on MPS (Jacobi kernels), accurately.

    Decides on MPS: each decomposition of a 96x96 float32 matrix must run without CPU
    fallback and rebuild its input within 2e-3 (relative) of the float64 CPU reference.
    """
    if "mps" not in context.devices:
        return not_checkable(
            "not checked: needs an Apple-Silicon GPU (mps); the CPU "
            "float32 figures are shown as information",
            cpu_information=_linalg_errors("cpu"),
        )
    return _verdict(_linalg_errors("mps"), _LINALG_TOLERANCE, "SVD/eigh/QR/Cholesky")


def _reduction_errors(device: str) -> dict[str, dict[str, Any]]:
    """Reductions over a large, a transposed and a small-valued tensor, against float64."""
    import torch

    generator = torch.Generator().manual_seed(11)
    large = torch.randn(1 << 20, generator=generator, dtype=torch.float64)
    matrix = torch.randn(384, 520, generator=generator, dtype=torch.float64)
    near_one = 1 + torch.rand(64, 33, generator=generator, dtype=torch.float64) / 64
    cases: dict[str, tuple[Callable[[Any], Any], Any]] = {
        "sum_1M": (lambda t: t.sum(), large),
        "mean_rows_transposed": (lambda t: t.T.mean(dim=0), matrix),
        "amax_cols": (lambda t: t.amax(dim=0), matrix),
        "argmax_rows": (lambda t: t.argmax(dim=1), matrix),
        "var_rows": (lambda t: t.var(dim=1), matrix),
        "std_all": (lambda t: t.std(), matrix),
        "prod_rows": (lambda t: t.prod(dim=1), near_one),
        "logsumexp_cols": (lambda t: t.logsumexp(dim=0), matrix),
        "norm_rows": (lambda t: torch.linalg.vector_norm(t, dim=1), matrix),
    }

    def one(fn: Callable[[Any], Any], data: Any) -> Callable[[], dict[str, float]]:
        def check() -> dict[str, float]:
            got = fn(data.float().to(device)).cpu()
            want = fn(data)
            if not want.is_floating_point():
                return {"mismatched_indices": float((got != want).sum().item())}
            return {"relative": _relative(got.double(), want)}

        return check

    return {name: _checked(one(fn, data)) for name, (fn, data) in cases.items()}


def run_reductions(context: ProbeContext) -> Outcome:
    """Claim: the rewritten MPS reductions are native and correct.

    Decides on MPS: sum, mean, amax, argmax, var, std, prod, logsumexp and norm over a
    1M-element vector and transposed/odd-sized matrices must run without CPU fallback and
    agree with float64 within 1e-3 relative (argmax exactly).
    """
    if "mps" not in context.devices:
        return not_checkable(
            "not checked: needs an Apple-Silicon GPU (mps); the CPU "
            "float32 figures are shown as information",
            cpu_information=_reduction_errors("cpu"),
        )
    return _verdict(_reduction_errors("mps"), _REDUCTION_TOLERANCE, "reductions")


PROBES = (
    Probe(
        id="mps.linalg-native",
        claim="SVD, eigh, QR and Cholesky run natively on Apple-Silicon GPUs and match "
        "a float64 reference.",
        release_claim="Apple Silicon: Native Jacobi-kernel SVD, eigh, QR, and Cholesky",
        scope="mps",
        run=run_linalg,
        timeout_s=120,
    ),
    Probe(
        id="mps.reductions",
        claim="MPS reductions (sum, mean, max, var, prod, norm, ...) run natively and "
        "match a float64 reference.",
        release_claim="Apple Silicon: ... a five-part reduction rewrite",
        scope="mps",
        run=run_reductions,
        timeout_s=120,
    ),
)
