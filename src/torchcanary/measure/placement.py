"""Which CPUs a side's timed samples run on: read by the worker that pins itself there and
by the orchestrator that keeps untimed work off them. Stdlib only (both sides import it)."""

from __future__ import annotations


def timed_cpus(allowed: list[int], threads: int, cpus: list[int] | None) -> list[int]:
    """``cpus`` if given (those of them the process may use), else the last ``threads`` of
    ``allowed``; all of ``allowed`` when that leaves none."""
    return [c for c in (cpus or allowed[-threads:]) if c in allowed] or allowed
