"""What a run prints when it ends: each section's summary (or a fleet's profiles side by
side), where the time went, and the verdict line with the exit code that says the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markdown import Markdown

from torchcanary.errors import EXIT_GO, EXIT_INTERNAL, EXIT_NO_GO
from torchcanary.policy import headline
from torchcanary.report.view import load_run_view
from torchcanary.sections import registered
from torchcanary.store.base import ResultStore

if TYPE_CHECKING:
    from torchcanary.policy import Decision


def print_outcome(console: Console, store: ResultStore, run_id: str) -> None:
    """The summary a run prints: a fleet's profiles side by side, else each profile's
    (a bench across nodes stores its rows under the nodes' profile) or the run's own,
    then where the time went when the run kept that."""
    view = load_run_view(store, run_id)
    if view.fleet:
        print_fleet_summary(console, store, run_id)
        return
    profiles = store.run_profiles(run_id).items()
    for scoped in [store.scoped(node, profile) for profile, node in profiles] or [store]:
        print_summary(console, scoped, run_id)
    if (view.run.decision_detail or {}).get("seconds"):
        print_time(console, store, run_id)


def print_verdict(
    console: Console,
    decision: Decision,
    outputs: dict[str, Path],
    failures: dict[str, str],
    cited: str = "",
) -> int:
    """The report's files and the line to cite ("run R, digest D"), then the last lines a
    reader sees: the verdict, why, and where the report is; and the exit code that says
    the same (a no-go exit is not a crash)."""
    for kind, path in outputs.items():
        console.print(f"{kind:>8}: {path}", highlight=False)
    if cited:  # before the verdict, which stays the last thing said (make run adds to it)
        console.print(f"evidence: {cited}", markup=False, highlight=False, soft_wrap=True)
    if failures:
        code = EXIT_INTERNAL
        broken = [f"{unit} could not finish: {error}" for unit, error in failures.items()]
        verdict = f"none (exit {code}): {_first_of(broken, 'failure')}"
    elif decision.go and decision.warnings:
        # A go the policy let through with warnings must not read as a clean go.
        code = EXIT_GO
        verdict = (
            f"{decision.headline} (exit {code}) with warnings: "
            f"{_first_of(decision.warnings, 'warning')}"
        )
    elif decision.go:
        code, verdict = EXIT_GO, f"go (exit {EXIT_GO}): no policy objected"
    else:
        code = EXIT_NO_GO
        verdict = f"no-go (exit {code}): {_first_of(decision.reasons, 'reason')}"
    console.print(f"verdict: {verdict}", markup=False, highlight=False, soft_wrap=True)
    report = outputs.get("html") or next(iter(outputs.values()), None)
    if report is not None:
        console.print(f"  report: {report}", markup=False, highlight=False, soft_wrap=True)
    return code


def _first_of(items: Sequence[str], noun: str) -> str:
    """The first of ``items``, and how many more are listed above."""
    if not items:
        return "see the report"
    more = len(items) - 1
    return items[0] + (f" (and {more} more {noun}{'s' * (more > 1)} above)" if more > 0 else "")


def print_fleet_summary(console: Console, store: ResultStore, run_id: str) -> None:
    from torchcanary.report.fleet import fleet_parts

    view = load_run_view(store, run_id)
    profiles = list(view.profiles)
    # Each section's own side-by-side of the profiles (the claims: a claim x profile table).
    for part in fleet_parts(view).values():
        for renderable in part.terminal:
            console.print(renderable)
    detail = view.run.decision_detail or {}
    colour = "green" if view.run.decision == "go" else "red"
    console.print(
        f"decision across {len(profiles)} profiles: "
        f"[bold {colour}]{headline(view.run.decision, detail)}[/]"
    )
    for reason in detail.get("reasons", []):
        console.print(f"  - {reason}", markup=False, highlight=False)
    for warning in detail.get("warnings", []):
        console.print(f"  - warning: {warning}", markup=False, highlight=False)


def print_summary(console: Console, store: ResultStore, run_id: str) -> None:
    view = load_run_view(store, run_id)
    # Each section prints its own part: its terminal rendering where it has one (the claims'
    # table), else its Markdown summary.
    for name in view.run.plan.get("sections", ()):
        section = registered().get(name)
        if section is None:
            continue  # a plugin since removed: `torchcanary report` still has its rows
        parts = section.terminal(view)
        for part in [Markdown(section.markdown(view))] if parts is None else parts:
            console.print(part)
    confounds = view.confounds()
    if confounds:
        console.print(
            "[yellow]confounds:[/] "
            + "; ".join(f"{k}: {b} vs {c}" for k, (b, c) in confounds.items()),
            highlight=False,
        )
    detail = view.run.decision_detail or {}
    colour = "green" if view.run.decision == "go" else "red"
    console.print(f"decision: [bold {colour}]{headline(view.run.decision, detail)}[/]")
    for reason in detail.get("reasons", []):
        console.print(f"  - {reason}", markup=False, highlight=False)
    for warning in detail.get("warnings", []):
        console.print(f"  - warning: {warning}", markup=False, highlight=False)


def print_time(console: Console, store: ResultStore, run_id: str) -> None:
    """Where the run's time went and what it kept from earlier runs (as summary.md says)."""
    from torchcanary.report.markdown import time_lines

    for line in time_lines(load_run_view(store, run_id)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
