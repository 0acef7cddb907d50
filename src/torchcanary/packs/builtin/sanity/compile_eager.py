"""torch.compile works on a small model and agrees with eager.

A real Inductor compile (so it needs a working C++ compiler on CPU); its output is
compared with eager on the same inputs, forwards and backwards.
"""

from __future__ import annotations

from torchcanary.probe import Probe, ProbeContext, confirmed, refuted
from torchcanary.probe_result import Outcome

_TOLERANCE = 1e-4


def compile_matches_eager(ctx: ProbeContext) -> Outcome:
    """Claim: a small MLP compiled with torch.compile gives eager's outputs and gradients.

    Decides by running the same seeded model eagerly and compiled (default Inductor
    backend), comparing the forward output and every parameter gradient.
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    )
    x = torch.randn(16, 32)
    eager_out = model(x)
    eager_out.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    compiled = torch.compile(model)
    compiled_out = compiled(x)
    compiled_out.sum().backward()
    compiled_grads = [p.grad for p in model.parameters() if p.grad is not None]
    forward_error = float((compiled_out - eager_out).detach().abs().max())
    grad_error = max(
        float((a - b).abs().max()) for a, b in zip(compiled_grads, eager_grads, strict=True)
    )
    evidence = {"forward_error": forward_error, "grad_error": grad_error}
    if forward_error > _TOLERANCE or grad_error > _TOLERANCE:
        return refuted("compiled model differs from eager", **evidence)
    return confirmed(f"compiled agrees with eager (max error {forward_error:.1e})", **evidence)


PROBES = (
    Probe(
        id="sanity.compile-vs-eager",
        claim="torch.compile on a small model gives eager's outputs and gradients.",
        scope="CPU (Inductor, needs a C++ compiler)",
        run=compile_matches_eager,
        timeout_s=400,
    ),
)
