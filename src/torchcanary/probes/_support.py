"""Small helpers the probe modules share: numeric comparison, timing, generated code, ranks.

Worker-side only (imports torch inside functions), and holds no probes of its own. Each
helper is here because two or more probe modules measure the same way; keeping one
definition means the catalogue compares like with like.
"""

from __future__ import annotations

import importlib
import re
import statistics
import time
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from torchcanary.worker.multirank import RanksFailed, run_ranks


def max_abs_error(actual: Any, expected: Any) -> float:
    """Largest elementwise distance, computed in float64 on the CPU (complex-aware)."""
    import torch

    a = actual.detach().to("cpu")
    b = expected.detach().to("cpu")
    wide = torch.complex128 if (a.is_complex() or b.is_complex()) else torch.float64
    if a.numel() == 0:
        return 0.0
    return float((a.to(wide) - b.to(wide)).abs().max().item())


def median_seconds(
    fn: Callable[[], Any], *, repeats: int, sync: Callable[[], None], warmup: int = 2
) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs, synchronising the device each time."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def device_sync(device: str) -> Callable[[], None]:
    """The synchronise call for a device kind, so timings include the kernel, not the launch."""
    import torch

    if device == "cuda":
        return torch.cuda.synchronize
    if device == "mps":
        return torch.mps.synchronize
    if device == "xpu":
        return torch.xpu.synchronize
    return lambda: None


def lookup(dotted: str) -> Any:
    """The object a user reaches by writing ``dotted`` (attributes first, then submodules),
    or None. ``torch.x.y`` means attribute ``y`` of ``torch.x`` even if a submodule ``y``
    also exists, as Python's own attribute access would."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            found = getattr(obj, attr, None)
            if found is None and isinstance(obj, types.ModuleType):
                try:
                    found = importlib.import_module(f"{obj.__name__}.{attr}")
                except ImportError:
                    found = None
            if found is None:
                return None
            obj = found
        return obj
    return None


def compiled_with_code(
    fn: Callable[..., Any], *args: Any, **compile_kwargs: Any
) -> tuple[Any, str]:
    """Compile ``fn`` afresh with Inductor, run it once, and return (output, wrapper code).

    The FX graph cache is bypassed so the code really comes from this compile.
    """
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False):
        output, codes = run_and_get_code(torch.compile(fn, **compile_kwargs), *args)
    return output, "\n".join(codes)


def call_body(wrapper_code: str) -> list[str]:
    """The statements of the generated ``call`` function, comments dropped, in order."""
    start = wrapper_code.find("def call(")
    if start < 0:
        return []
    lines = []
    for line in wrapper_code[start:].splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            lines.append(stripped)
    return lines


# A generated statement that launches compute: a fused C++/Triton kernel, an extern
# kernel (mm and friends), or an ATen fallback assigned to a buffer.
_COMPUTE_STATEMENT = re.compile(
    r"^(cpp_fused_\w+\(|triton_\w+\.run\(|extern_kernels\.\w+\(|\w+ = torch\.ops\.aten\.)"
)


def is_compute_statement(statement: str) -> bool:
    return bool(_COMPUTE_STATEMENT.match(statement))


def run_on_ranks(
    target: str,
    world_size: int,
    kwargs: dict[str, Any] | None = None,
    *,
    backend: str = "gloo",
    timeout_s: float = 90.0,
    env: dict[str, str] | None = None,
) -> tuple[list[Any] | None, str]:
    """Rank values, or (None, why) when the group failed after it formed: the probe reports
    either. A group that never formed says nothing about the claim, so it propagates and
    the probe ends in ``error``, not in a verdict."""
    try:
        return run_ranks(
            target, world_size, kwargs, backend=backend, timeout_s=timeout_s, env=env
        ), ""
    except RanksFailed as failure:
        if not failure.formed:
            raise
        tails = [f"rank {r['rank']}: {r['stderr_tail'][-600:]}" for r in failure.ranks]
        return None, f"{failure}\n" + "\n".join(tails)


def raised(values: Iterable[Any]) -> list[str]:
    """The exception text of every rank whose target raised (see ``run_ranks``)."""
    return [v["raised"] for v in values if isinstance(v, dict) and "raised" in v]


def quietly(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` and return its value plus the warnings it raised (fallback notices etc.)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
    return value, [str(w.message)[:300] for w in caught]
