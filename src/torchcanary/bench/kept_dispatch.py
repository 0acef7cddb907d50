"""Dispatch profiles reused from an earlier run of the same fixed environment.

A dispatch profile (:mod:`.dispatch`) lists the operators, kernels and library calls one
call of a benchmark reaches, with their counts per call: a fact of the environment, the
machine and the benchmark, not a timing, kept under ``<cache>/dispatch-profiles/`` by
:class:`.kept_facts.KeptFacts` and keyed by the benchmark's spec as that side ran it
(format 2: entries hold a "fact"; format 1 held a "profile").
"""

from __future__ import annotations

from typing import Any

from torchcanary.bench.kept_facts import FactKind

_VIEWS = ("ops", "kernels", "library_calls")


def _check(profile: dict[str, Any]) -> str | None:
    if not all(isinstance(profile.get(view), dict) for view in _VIEWS):
        return "it holds no dispatch profile"
    return None


DISPATCH_PROFILES = FactKind("dispatch-profiles", 2, "the kept dispatch profile", _check)
