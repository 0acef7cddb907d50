"""Control flow: ``torch.switch`` (multi-way ``torch.cond``) and ``while_loop`` in CUDA graphs.

``torch.switch`` is the name the release uses, so that is what is checked; an internal
operator of the same job is exercised too, but only as evidence of what the build holds.
Both are compared against plain Python picking ``branches[i]``. The CUDA-graph claim
needs CUDA: elsewhere the probe is not checkable and shows, as information, that
``while_loop`` itself computes what the equivalent Python loop computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchcanary.probe import Probe, ProbeContext, absent, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import lookup, max_abs_error

_INTERNAL_SWITCH = "torch._higher_order_ops.switch"


def _branches() -> tuple[Callable[[Any], Any], ...]:
    import torch

    return (lambda x: x + 1, lambda x: x * 2, lambda x: torch.sin(x) - x)


def _exercise_switch(switch: Callable[..., Any], backend: str) -> dict[str, Any]:
    """Eager (int and tensor index) and compiled (tensor index, fullgraph) against Python."""
    import torch
    from torch._dynamo.utils import counters

    branches = _branches()
    x = torch.randn(6, generator=torch.Generator().manual_seed(1))
    eager = {}
    for index in range(len(branches)):
        expected = branches[index](x)
        eager[index] = max(
            max_abs_error(switch(index, branches, (x,)), expected),
            max_abs_error(switch(torch.tensor(index), branches, (x,)), expected),
        )

    def pick(index: Any, value: Any) -> Any:
        return switch(index, branches, (value,))

    torch._dynamo.reset()
    graphs_before = counters["stats"]["unique_graphs"]
    compiled = torch.compile(pick, backend=backend, fullgraph=True)
    compiled_errors = {
        i: max_abs_error(compiled(torch.tensor(i), x), branches[i](x)) for i in range(len(branches))
    }
    graphs = counters["stats"]["unique_graphs"] - graphs_before
    torch._dynamo.reset()
    return {
        "compile_backend": backend,
        "eager_max_error": eager,
        "compiled_max_error": compiled_errors,
        "compiled_graphs_for_three_indices": graphs,
        "ok": max(eager.values()) < 1e-6 and max(compiled_errors.values()) < 1e-5 and graphs == 1,
    }


def run_switch(context: ProbeContext) -> Outcome:
    """Claim: ``torch.switch(index, branches, operands)`` runs ``branches[index]`` and, like
    ``torch.cond``, compiles into one graph whatever the index.

    Decides with three branches over a 6-element tensor: eager results for int and
    tensor indices, and results of a ``fullgraph`` torch.compile across all three tensor
    indices, must equal Python's ``branches[i](x)``, with exactly one compiled graph.
    """
    public = lookup("torch.switch")
    internal = lookup(_INTERNAL_SWITCH)
    if public is None:
        evidence: dict[str, Any] = {"torch.switch": "missing"}
        if callable(internal):
            evidence["internal_switch"] = _INTERNAL_SWITCH
            # Evidence only, so the cheaper aot_eager backend is enough to show it traces.
            evidence["internal_behaviour"] = _exercise_switch(internal, "aot_eager")
        return absent(
            "torch.switch does not exist"
            + (
                f" (an internal {_INTERNAL_SWITCH} does; see evidence)"
                if callable(internal)
                else ""
            ),
            **evidence,
        )
    behaviour = _exercise_switch(public, "inductor")
    if not behaviour["ok"]:
        return refuted(
            "torch.switch disagrees with Python's branch pick or recompiles", **behaviour
        )
    return confirmed(
        "torch.switch matched Python for every index, eagerly and in one compiled graph",
        **behaviour,
    )


def _loop_inputs(steps: int) -> tuple[Any, Any, Any]:
    import torch

    return (torch.tensor(0), torch.tensor(steps), torch.linspace(0.0, 1.0, 5, dtype=torch.float64))


def _loop_functions() -> tuple[Callable[..., Any], Callable[..., Any]]:
    def cond_fn(i: Any, limit: Any, acc: Any) -> Any:
        return i < limit

    def body_fn(i: Any, limit: Any, acc: Any) -> tuple[Any, Any, Any]:
        return i + 1, limit.clone(), acc * 1.5 + i

    return cond_fn, body_fn


def _python_loop(steps: int) -> Any:
    _, _, acc = _loop_inputs(steps)
    for i in range(steps):
        acc = acc * 1.5 + i
    return acc


def _while_loop_on_cpu() -> dict[str, Any]:
    """Information for machines without CUDA: while_loop against the Python loop."""
    import torch

    cond_fn, body_fn = _loop_functions()

    def run(i: Any, limit: Any, acc: Any) -> Any:
        return torch.while_loop(cond_fn, body_fn, (i, limit, acc))[2]

    eager = {n: max_abs_error(run(*_loop_inputs(n)), _python_loop(n)) for n in (0, 3, 7)}
    # aot_eager traces the loop into a graph as Inductor would, without a C++ build.
    torch._dynamo.reset()
    traced = torch.compile(run, backend="aot_eager", fullgraph=True)
    traced_errors = {n: max_abs_error(traced(*_loop_inputs(n)), _python_loop(n)) for n in (3, 7)}
    torch._dynamo.reset()
    return {"eager_max_error": eager, "aot_eager_max_error": traced_errors}


def run_while_loop_cudagraph(context: ProbeContext) -> Outcome:
    """Claim: a compiled ``torch.while_loop`` can be captured in a CUDA graph.

    Decides on CUDA with ``mode="reduce-overhead"``: a loop whose trip count is data
    (3, 7, then 2 steps) must be recorded into a CUDA graph (no cudagraph skips, a recorded
    node in the tree) and each replay must match the Python loop, which shows the trip
    count is decided on the device and not baked into the capture.
    """
    import torch

    if not torch.cuda.is_available():
        return not_checkable(
            "not checked: CUDA-graph capture needs a CUDA GPU; "
            "while_loop correctness on CPU shown as information",
            cpu_information=_while_loop_on_cpu(),
        )
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    cond_fn, body_fn = _loop_functions()

    def run(i: Any, limit: Any, acc: Any) -> Any:
        return torch.while_loop(cond_fn, body_fn, (i, limit, acc))[2]

    torch._dynamo.reset()
    skips_before = counters["inductor"]["cudagraph_skips"]
    compiled = torch.compile(run, mode="reduce-overhead", fullgraph=True)
    errors = {}
    for steps in (3, 7, 2, 5):
        inputs = [t.cuda() for t in _loop_inputs(steps)]
        errors[steps] = max_abs_error(compiled(*inputs).clone(), _python_loop(steps))
    torch.cuda.synchronize()
    skips = counters["inductor"]["cudagraph_skips"] - skips_before
    manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    recorded = sum(len(nodes) for nodes in manager.roots.values()) if manager else 0
    evidence = {"max_error_by_steps": errors, "cudagraph_skips": skips, "recorded_graphs": recorded}
    torch._dynamo.reset()
    if skips or not recorded:
        return refuted(
            "while_loop was not captured: cudagraphs skipped or never recorded", **evidence
        )
    if max(errors.values()) > 1e-9:
        return refuted("the captured while_loop replayed wrong results", **evidence)
    return confirmed(
        "while_loop recorded into a CUDA graph and replays honour data-dependent trip counts",
        **evidence,
    )


PROBES = (
    Probe(
        id="control-flow.torch-switch",
        claim="torch.switch picks one of N branches by index, eagerly and inside one "
        "compiled graph.",
        release_claim="Control flow: torch.switch generalizes torch.cond to multi-way branches",
        scope="any",
        run=run_switch,
        timeout_s=150,
    ),
    Probe(
        id="control-flow.while-loop-cudagraph",
        claim="A compiled torch.while_loop with a data-dependent trip count can be "
        "captured and replayed in a CUDA graph.",
        release_claim="torch.while_loop can be captured in a CUDA graph",
        scope="cuda",
        run=run_while_loop_cudagraph,
        timeout_s=180,
    ),
)
