"""Inductor scheduling defaults: ``simple_overlap`` on, ``reorder_for_locality_in_training``
opt-in.

Both are decided from what Inductor actually does, not only from the config default: the
overlap probe compiles a function with an all_reduce on two live gloo ranks and reads the
generated code's order; the locality probe watches whether the locality pass runs on a
training graph with the option off and on. The config entries are the names the release
uses; a missing entry is reported as absent with the observed behaviour as evidence.
"""

from __future__ import annotations

from typing import Any

from torchcanary.probe import Probe, ProbeContext, absent, confirmed, refuted
from torchcanary.probe_result import Outcome
from torchcanary.probes._support import (
    call_body,
    compiled_with_code,
    is_compute_statement,
    max_abs_error,
    raised,
    run_on_ranks,
)

_OVERLAP_FLAG = "enable_simple_overlap"


def _overlap_window(wrapper_code: str) -> dict[str, Any]:
    """Compute statements between the all_reduce launch and the first wait after it."""
    body = call_body(wrapper_code)
    launch = next((i for i, s in enumerate(body) if "_c10d_functional.all_reduce" in s), None)
    if launch is None:
        return {"launch_found": False, "statements": body[:60]}
    wait = next((i for i in range(launch + 1, len(body)) if "wait_tensor" in body[i]), None)
    between = body[launch + 1 : wait] if wait is not None else []
    return {
        "launch_found": True,
        "wait_found": wait is not None,
        "compute_between": sum(is_compute_statement(s) for s in between),
        "statements": body[launch : (wait + 1 if wait is not None else launch + 1)],
    }


def overlap_on_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Rank side: compile one function with the default config and read the schedule.

    Where the pass exists it is wrapped (not replaced) so the node order it received and
    the order it returned are both recorded: the received order is what the schedule
    would have been without it.
    """
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch._inductor import comms
    from torch._inductor import config as inductor_config

    group = dist.group.WORLD

    def step(x: Any) -> tuple[Any, Any]:
        a = x @ x
        b = a @ a
        reduced = funcol.all_reduce(b, "sum", group)  # needs b; independent of c and d
        c = x @ a
        d = c @ c
        return d, funcol.wait_tensor(reduced) + 1

    x = torch.randn(32, 32, generator=torch.Generator().manual_seed(0)) / 6
    expected = step(x)
    orders: list[dict[str, list[str]]] = []
    real_pass = getattr(comms, "simple_overlap", None)
    if real_pass is not None:

        def recording_pass(snodes: Any) -> Any:
            result = real_pass(snodes)
            orders.append(
                {
                    "received": [n.get_name() for n in snodes],
                    "returned": [n.get_name() for n in result],
                }
            )
            return result

        comms.simple_overlap = recording_pass
    try:
        output, code = compiled_with_code(step, x)
    finally:
        if real_pass is not None:
            comms.simple_overlap = real_pass
    options = inductor_config.aten_distributed_optimizations
    report: dict[str, Any] = {
        "default": _overlap_window(code),
        "pass_runs": orders,
        "pass_moved_nodes": any(run["received"] != run["returned"] for run in orders),
        "max_error": max(max_abs_error(o, e) for o, e in zip(output, expected, strict=True)),
        "flag_present": hasattr(options, _OVERLAP_FLAG),
    }
    if report["flag_present"]:
        report["flag_default"] = bool(getattr(options, _OVERLAP_FLAG))
    return report


def run_simple_overlap(context: ProbeContext) -> Outcome:
    """Claim: by default Inductor moves collectives earlier and waits later so independent
    compute runs while the collective is in flight (``simple_overlap``).

    Decides on 2 gloo ranks compiling ``all_reduce(b)`` followed in program order by
    matmuls that do not need its result: with the default config the generated code must
    put at least one compute kernel between the all_reduce launch and its wait, results
    must match eager, the option must exist and default to on, and the pass must be what
    moved the nodes (the order it received differs from the order it returned).
    """
    values, failure = run_on_ranks(f"{__name__}:overlap_on_rank", 2, timeout_s=200)
    if values is None:
        return refuted("compiling with a collective on gloo failed", failure=failure)
    if raised(values):
        return refuted(f"compile with a collective raised: {raised(values)[0]}", ranks=values)
    report = values[0]
    default = report["default"]
    overlapped = default.get("compute_between", 0) > 0
    if report["max_error"] > 1e-4:
        return refuted("the compiled collective step disagrees with eager", **report)
    if not report["flag_present"]:
        return absent(
            f"Inductor has no aten_distributed_optimizations.{_OVERLAP_FLAG} option; default "
            f"code {'does' if overlapped else 'does not'} overlap the all_reduce",
            **report,
        )
    if not report["flag_default"]:
        return refuted(f"{_OVERLAP_FLAG} exists but defaults to False", **report)
    if not overlapped:
        return refuted(
            "with the default config the wait follows the all_reduce with no compute in between",
            **report,
        )
    if not report["pass_moved_nodes"]:
        return refuted(
            "compute overlaps the all_reduce, but not because simple_overlap moved anything",
            **report,
        )
    return confirmed(
        f"{_OVERLAP_FLAG}=True by default; the pass moved the wait so "
        f"{default['compute_between']} compute kernel(s) run between the all_reduce and it",
        **report,
    )


def _training_step(weights: Any, inputs: Any) -> Any:
    import torch

    hidden = torch.tanh(inputs @ weights)
    return (hidden * hidden.sin()).sum()


def _compile_training(flag: bool | None) -> dict[str, Any]:
    """Compile forward+backward; count locality-pass runs; compare loss and grad to eager."""
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.fx_passes import post_grad

    generator = torch.Generator().manual_seed(9)
    weights = torch.randn(16, 16, generator=generator, requires_grad=True)
    inputs = torch.randn(8, 16, generator=generator)
    loss = _training_step(weights, inputs)
    (grad,) = torch.autograd.grad(loss, weights)

    runs: list[int] = []
    real_pass = post_grad.reorder_for_locality

    def counting_pass(graph: Any) -> Any:
        runs.append(len(graph.nodes))
        return real_pass(graph)

    patches = {} if flag is None else {"reorder_for_locality_in_training": flag}
    post_grad.reorder_for_locality = counting_pass
    try:
        with inductor_config.patch(patches):
            compiled_loss, _ = compiled_with_code(_training_step, weights, inputs)
            (compiled_grad,) = torch.autograd.grad(compiled_loss, weights)
    finally:
        post_grad.reorder_for_locality = real_pass
    return {
        "locality_pass_runs": len(runs),
        "loss_error": max_abs_error(compiled_loss, loss),
        "grad_error": max_abs_error(compiled_grad, grad),
    }


def run_locality_opt_in(context: ProbeContext) -> Outcome:
    """Claim: ``reorder_for_locality_in_training`` exists, is off by default, and turning it
    on applies the locality pass to training graphs without changing results.

    Decides by compiling a forward+backward step twice: with the defaults the locality
    pass must not run on the training graphs; with the option on it must run; loss and
    gradient must match eager both times.
    """
    from torch._inductor import config as inductor_config

    if not hasattr(inductor_config, "reorder_for_locality_in_training"):
        return absent("Inductor has no reorder_for_locality_in_training option")
    default_value = bool(inductor_config.reorder_for_locality_in_training)
    default_run = _compile_training(None)
    enabled_run = _compile_training(True)
    evidence = {"default_value": default_value, "default": default_run, "enabled": enabled_run}
    wrong = [
        name
        for name, run in (("default", default_run), ("enabled", enabled_run))
        if max(run["loss_error"], run["grad_error"]) > 1e-4
    ]
    if wrong:
        return refuted(
            f"compiled training step disagrees with eager ({', '.join(wrong)})", **evidence
        )
    if default_value or default_run["locality_pass_runs"]:
        return refuted("the locality pass already runs on training graphs by default", **evidence)
    if not enabled_run["locality_pass_runs"]:
        return refuted(
            "turning the option on did not run the locality pass on training graphs", **evidence
        )
    return confirmed(
        "off by default (pass not run on training graphs); when enabled the "
        f"pass ran {enabled_run['locality_pass_runs']} time(s) and results "
        "matched eager",
        **evidence,
    )


PROBES = (
    Probe(
        id="inductor.simple-overlap-default",
        claim="Inductor's default schedule interleaves independent compute between a "
        "collective's launch and its wait.",
        release_claim="Inductor defaults: simple_overlap reordering (collectives "
        "interleaved with independent compute) is on by default",
        scope="gloo (any device)",
        run=run_simple_overlap,
        timeout_s=300,
    ),
    Probe(
        id="inductor.locality-in-training-opt-in",
        claim="Locality reordering of training graphs is available but off unless asked "
        "for, and harmless when on.",
        release_claim="reorder_for_locality_in_training remains opt-in",
        scope="any",
        run=run_locality_opt_in,
        timeout_s=240,
    ),
)
