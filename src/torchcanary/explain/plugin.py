"""The explain section's entry in the section contract (registered in pyproject.toml)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchcanary.contract import (
    JUnitCase,
    PlannedUnit,
    RunContext,
    RunPlan,
    RunView,
    Section,
)
from torchcanary.explain.settings import MODES

if TYPE_CHECKING:
    from torchcanary.results import SectionRecord


def add_flags(parser: argparse.ArgumentParser, own_command: bool) -> None:
    parser.add_argument(
        "--explain",
        dest="explain_mode",
        choices=MODES,
        help="explain each finding: off, quick (default: within a quarter of the run's time) "
        "or full (more repeats)",
    )


def flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    mode = getattr(args, "explain_mode", None)
    return {"mode": mode} if mode else {}


class ExplainSection(Section):
    """The explain section: each part forwards to the module that does it, imported on
    first use so ``torchcanary --help`` stays fast."""

    name = "explain"
    order = 90
    help = None

    def add_flags(self, parser: argparse.ArgumentParser, own_command: bool) -> None:
        add_flags(parser, own_command)

    def flag_settings(self, args: argparse.Namespace) -> dict[str, Any]:
        return flag_settings(args)

    @property
    def policy_defaults(self) -> Mapping[str, Any]:
        from torchcanary.explain import section

        return section.POLICY_DEFAULTS

    @property
    def checked_verdicts(self) -> frozenset[str]:
        from torchcanary.explain import section

        return section.CHECKED_VERDICTS

    def parse_settings(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from torchcanary.explain import section

        return section.parse_settings(dict(raw))

    def planned_units(self, plan: RunPlan) -> list[PlannedUnit]:
        from torchcanary.explain import section

        return section.planned_units(plan)

    def run(self, ctx: RunContext) -> None:
        from torchcanary.explain import section

        section.run(ctx)

    def record_from_json(self, data: Mapping[str, Any]) -> SectionRecord:
        from torchcanary.explain import result

        return result.from_json(dict(data))

    def blocking_reasons(self, view: RunView, policy: Mapping[str, Any]) -> list[str]:
        from torchcanary.explain import section

        return section.blocking_reasons(view, dict(policy))

    def html(self, view: RunView) -> str:
        from torchcanary.explain import report

        return report.html(view)

    def markdown(self, view: RunView) -> str:
        from torchcanary.explain import report

        return report.markdown(view)

    def junit_cases(self, view: RunView) -> list[JUnitCase]:
        from torchcanary.explain import report

        return report.junit_cases(view)

    def json_parts(self, view: RunView) -> dict[str, Any]:
        from torchcanary.explain import report

        return report.json_parts(view)

    def compared(self, view: RunView) -> dict[str, dict[str, Any]] | None:
        from torchcanary.explain import history

        return history.compared(view)


SECTION = ExplainSection()
