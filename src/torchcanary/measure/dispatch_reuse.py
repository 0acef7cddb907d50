"""Dispatch profiles reused from an earlier run of the same fixed environment.

A dispatch profile (:mod:`.dispatch`) lists the operators, kernels and library calls one
call of a benchmark reaches, with their counts per call: a fact of the environment, the
machine and the benchmark, not a timing, kept under ``<cache>/dispatch-profiles/`` by
:class:`.kept_facts.KeptFacts` and keyed by the benchmark's spec as that side ran it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchcanary.envs.cache import Environment
from torchcanary.measure.kept_facts import KeptFacts
from torchcanary.results import Manifest

CACHE_SCHEMA = 2  # 2: entries hold a "fact" (1 held a "profile")
_VIEWS = ("ops", "kernels", "library_calls")


def _check(profile: dict[str, Any]) -> str | None:
    if not all(isinstance(profile.get(view), dict) for view in _VIEWS):
        return "it holds no dispatch profile"
    return None


def dispatch_reuse(
    directory: Path,
    environments: dict[str, Environment],
    manifests: dict[str, Manifest],
    run_id: str,
    warn: Callable[[str], None] = lambda message: None,
) -> KeptFacts:
    """The dispatch profiles kept in ``directory`` for this run's fixed environments."""
    return KeptFacts(
        directory,
        CACHE_SCHEMA,
        "the kept dispatch profile",
        _check,
        environments,
        manifests,
        run_id,
        warn,
    )
