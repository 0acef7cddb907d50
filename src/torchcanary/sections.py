"""The sections of a run and where each lives.

Each section is a package with the same three-part shape, so a reader knows where to look:
- ``<package>.section``: ``parse_settings(mapping) -> dict`` (validates its config table,
  raising ConfigError) and ``run(ctx: RunContext) -> None`` (does the work, commits each
  finished unit to the store, skips units already stored when resuming);
- ``<package>.report``: ``html(view) -> str``, ``markdown(view) -> str`` and
  ``junit_cases(view) -> list[JUnitCase]`` over a :class:`~torchcanary.report.view.RunView`;
- ``<package>.section.blocking_reasons(view, policy) -> list[str]``: why this section says
  no-go under ``policy`` (empty when it has no objection);
- ``<package>.section.POLICY_DEFAULTS``: every policy key ``blocking_reasons`` reads, with
  its default, the same keys the module docstring documents (tests/test_policy.py checks).
Modules are imported lazily, so ``torchcanary --help`` stays fast and one broken section
cannot stop the others.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SECTION_PACKAGES = {
    "claims": "torchcanary.claims",
    "bench": "torchcanary.measure",
    "drill": "torchcanary.drills",
    "stack": "torchcanary.stack",
    "diff": "torchcanary.surface",
}


def section_module(section: str) -> ModuleType:
    return importlib.import_module(SECTION_PACKAGES[section] + ".section")


def report_module(section: str) -> ModuleType:
    return importlib.import_module(SECTION_PACKAGES[section] + ".report")
