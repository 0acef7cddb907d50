"""The machine's roofline reused from an earlier run of the same fixed environment.

The roofline (:mod:`.roofline_probe`) is the best memory bandwidth and matmul rate one
environment reaches on this machine: ceilings, each a best of several tries, that place a
benchmark's rate and never decide a verdict. Measuring them costs about 5 s per
environment in every run; they are kept under ``<cache>/rooflines/`` by
:class:`.kept_facts.KeptFacts`, keyed by the probe's request (device, dtypes, working-set
sizes) and the threads and CPUs it ran on, and the report names the run that measured
them. They are the one timing torchcanary keeps, and for a week at most: a machine's
settings (frequency governor, turbo, memory configuration) can change under the same CPU
model, and a ceiling measured on a bad day should not outlive it.
"""

from __future__ import annotations

from typing import Any

from torchcanary.bench.kept_facts import FactKind


def _check(roofline: dict[str, Any]) -> str | None:
    if not all(isinstance(roofline.get(part), dict) for part in ("bandwidth", "peak")):
        return "it holds no roofline"
    if roofline.get("errors"):
        return "a part of it could not be measured"  # measured again, never kept half
    return None


ROOFLINES = FactKind("rooflines", 1, "the kept roofline", _check, max_age_s=7 * 24 * 3600.0)
