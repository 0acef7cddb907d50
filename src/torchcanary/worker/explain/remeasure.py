"""One more measurement of a finding's item, with some settings set back first.

The explain section's counterfactual calls :func:`measure` in a worker of its own (never
one that measured the main A/B): the environment changes are made before torch is imported
in this process, the python-level ones before the benchmark is built; then the target
(``steady`` or ``startup`` here) takes the sample.
"""

from __future__ import annotations

import importlib
import statistics
from typing import Any

from torchcanary.worker.explain.settings import apply_environment, apply_python

_APPLIED: list[bool] = []  # settings are applied once per worker process


def measure(
    target: str,
    kwargs: dict[str, Any],
    env: dict[str, str | None] | None = None,
    python: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``target(**kwargs)`` (``"module:function"`` answering ``{"seconds": s}``) after
    setting ``env`` and ``python`` back, the first time this worker is asked; an empty
    ``target`` only sets them (and so imports torch): a worker made ready, untimed."""
    if not _APPLIED:
        apply_environment(env or {})
        apply_python(python or {})
        _APPLIED.append(True)
    if not target:
        return {}
    module, _, function = target.partition(":")
    answer: dict[str, Any] = getattr(importlib.import_module(module), function)(**kwargs)
    return answer


def steady(spec: dict[str, Any], threads: int, count: int) -> dict[str, Any]:
    """The median seconds per call of a steady benchmark, over ``count`` samples: CPU
    seconds where it runs on one thread (the call's own work, which the machine's other
    work barely moves; its wall time, the bench's measure, then also holds the time that
    work took the core away), wall seconds with more threads (where their waiting, and
    how the work is spread over them, are part of what a setting changes)."""
    from torchcanary.worker.bench import timing

    timing.configure(threads)
    prepared = timing.prepare("explain", spec)
    if "skipped" in prepared:
        return {"error": prepared["skipped"]}
    sampled = timing.sample("explain", count)
    wall = statistics.median(sampled["times_s"])
    if threads == 1 and prepared.get("device", "cpu") == "cpu":
        return {"seconds": statistics.median(sampled["cpu_s"]), "clock": "cpu", "wall_s": wall}
    return {"seconds": wall, "clock": "wall"}


def startup(measure: str, threads: int) -> dict[str, Any]:
    """One fresh-interpreter sample of a startup measure (the environment is inherited)."""
    from torchcanary.worker.bench.oneshot import startup_sample

    answer = startup_sample([measure], "cpu", threads, 120.0)
    if "seconds" not in answer:
        return {"error": str(answer.get("failed") or answer.get("skipped"))}
    return {"seconds": answer["seconds"][measure]}
