"""``@dynamic_spec``: one declaration of dynamic shapes honoured by compile, export, make_fx.

The decorator is looked up where a user would look first (``torch.dynamic_spec``), then in
the namespaces below it; wherever it is found, one decorated function (and one decorated
``forward``) is pushed through all three front ends. Each must produce a graph whose
batch dimension is symbolic, and run other batch sizes correctly without re-tracing.
"""

from __future__ import annotations

from typing import Any

from torchcanary.probe import Probe, ProbeContext, absent, confirmed, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import lookup, max_abs_error

_WHERE_TO_LOOK = (
    "torch.dynamic_spec",
    "torch.export.dynamic_spec",
    "torch.compiler.dynamic_spec",
    "torch._dynamo.dynamic_spec",
    "torch.fx.experimental.dynamic_spec.dynamic_spec",
)
_SIZES = (3, 5, 9)


def _find_decorator() -> tuple[str | None, Any]:
    import types

    for dotted in _WHERE_TO_LOOK:
        found = lookup(dotted)
        if callable(found) and not isinstance(found, types.ModuleType):
            return dotted, found
    return None, None


def _sample(batch: int) -> Any:
    """A seeded [batch, 4] input, so the eager reference sees exactly the same numbers."""
    import torch

    return torch.randn(batch, 4, generator=torch.Generator().manual_seed(batch))


def _reference(batch: int, formula: Any) -> Any:
    return formula(_sample(batch))


def _symbolic_dims(shape: Any) -> list[bool]:
    import torch

    return [isinstance(dim, torch.SymInt) for dim in shape]


def _through_compile(decorated: Any, formula: Any) -> dict[str, Any]:
    """torch.compile with a graph-recording backend: count graphs, read their input shapes."""
    import torch

    graphs: list[list[list[bool]]] = []

    def recording_backend(gm: Any, example_inputs: Any) -> Any:
        shapes = [
            node.meta["example_value"].shape
            for node in gm.graph.nodes
            if node.op == "placeholder" and hasattr(node.meta.get("example_value"), "shape")
        ]
        graphs.append([_symbolic_dims(shape) for shape in shapes])
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(decorated, backend=recording_backend)
    errors = [max_abs_error(compiled(_sample(n)), _reference(n, formula)) for n in _SIZES]
    torch._dynamo.reset()
    return {
        "graphs": len(graphs),
        "placeholder_symbolic_dims": graphs,
        "errors": errors,
        "ok": len(graphs) == 1 and any(any(d) for d in graphs[0]) and max(errors) < 1e-5,
    }


def _through_export(module: Any, formula: Any) -> dict[str, Any]:
    import torch

    program = torch.export.export(module, (_sample(_SIZES[0]),))
    placeholders = [
        node.meta["val"].shape for node in program.graph.nodes if node.op == "placeholder"
    ]
    runnable = program.module()
    errors = [max_abs_error(runnable(_sample(n)), _reference(n, formula)) for n in _SIZES[1:]]
    dims = [_symbolic_dims(shape) for shape in placeholders]
    return {
        "placeholder_shapes": [str(s) for s in placeholders],
        "range_constraints": {str(k): str(v) for k, v in program.range_constraints.items()},
        "errors": errors,
        "ok": bool(dims) and dims[0][0] and max(errors) < 1e-5,
    }


def _through_make_fx(decorated: Any, formula: Any) -> dict[str, Any]:
    from torch.fx.experimental.proxy_tensor import make_fx

    # 'fake' is the mode the spec asks for (make_fx refuses 'real' with a spec attached).
    traced = make_fx(decorated, tracing_mode="fake")(_sample(_SIZES[0]))
    placeholders = [
        node.meta["val"].shape for node in traced.graph.nodes if node.op == "placeholder"
    ]
    errors = [max_abs_error(traced(_sample(n)), _reference(n, formula)) for n in _SIZES[1:]]
    dims = [_symbolic_dims(shape) for shape in placeholders]
    return {
        "placeholder_shapes": [str(s) for s in placeholders],
        "errors": errors,
        "ok": bool(dims) and dims[0][0] and max(errors) < 1e-5,
    }


def run_dynamic_spec(context: ProbeContext) -> Outcome:
    """Claim: a single ``@dynamic_spec`` declaration makes the batch dimension dynamic in
    torch.compile, torch.export and make_fx alike.

    Decides by decorating ``f(x) = (2x).sum(0) + x.shape[0]`` with batch dim ``B`` dynamic
    and dim 1 static: compile must build one graph with a symbolic input dim for batches
    3, 5 and 9 (without a spec, the first graph would be static and a second one would
    follow); export and make_fx must record a symbolic batch dim; every output must
    equal the same formula computed eagerly (inputs regenerated per batch size).
    """
    import torch

    where, dynamic_spec = _find_decorator()
    if dynamic_spec is None:
        spec_module = lookup("torch.fx.experimental.dynamic_spec")
        return absent(
            "no @dynamic_spec decorator in torch, torch.export, torch.compiler, "
            "torch._dynamo or torch.fx.experimental.dynamic_spec",
            searched=list(_WHERE_TO_LOOK),
            spec_module_names=sorted(getattr(spec_module, "__all__", [])),
        )
    spec_module = lookup("torch.fx.experimental.dynamic_spec")
    batch = spec_module.ShapeVar("B")
    spec = {"x": spec_module.TensorSpec([batch, spec_module.STATIC])}

    def formula(x: Any) -> Any:
        return (x * 2).sum(dim=0) + x.shape[0]

    @dynamic_spec(spec)
    def decorated(x: Any) -> Any:
        return formula(x)

    class Decorated(torch.nn.Module):
        @dynamic_spec(spec)
        def forward(self, x: Any) -> Any:
            return formula(x)

    results: dict[str, Any] = {}

    for name, check in (
        ("torch.compile", lambda: _through_compile(decorated, formula)),
        ("torch.export", lambda: _through_export(Decorated(), formula)),
        ("make_fx", lambda: _through_make_fx(decorated, formula)),
    ):
        try:
            results[name] = check()
        except Exception as exc:
            results[name] = {"ok": False, "raised": f"{type(exc).__name__}: {exc}"[:400]}
    failed = [name for name, result in results.items() if not result["ok"]]
    public = where == "torch.dynamic_spec"
    if failed:
        return refuted(
            f"@dynamic_spec (found at {where}) not honoured by {', '.join(failed)}",
            found_at=where,
            results=results,
        )
    return confirmed(
        f"@dynamic_spec from {where} gave a symbolic batch dim in compile, "
        "export and make_fx, one compiled graph for three sizes"
        + ("" if public else "; note: not exposed as torch.dynamic_spec"),
        found_at=where,
        results=results,
    )


PROBES = (
    Probe(
        id="dynamic-spec.shared-across-frontends",
        claim="One @dynamic_spec declaration makes the same dimension dynamic in "
        "torch.compile, torch.export and make_fx.",
        release_claim="@dynamic_spec: Shared declarative dynamic shapes across "
        "torch.compile, torch.export, and make_fx.",
        scope="any",
        run=run_dynamic_spec,
        timeout_s=120,
    ),
)
