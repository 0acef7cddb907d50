"""The drill verdicts are one vocabulary: stored by value, each with its JUnit status."""

from __future__ import annotations

from types import SimpleNamespace

from torchcanary.drills import report
from torchcanary.drills.drill import DrillOutcome
from torchcanary.drills.verdict import DrillVerdict
from torchcanary.store.rows import SectionResult


def test_every_drill_verdict_has_the_junit_status_a_ci_expects() -> None:
    rows = [
        SectionResult("drill", f"kill:{v.value}", "candidate", v.value, {"reason": "why"})
        for v in DrillVerdict
    ]
    statuses = {
        case.name.split(":")[1].split(" ")[0]: case.status
        for case in report.junit_cases(SimpleNamespace(sections={"drill": rows}))
    }
    assert statuses == {
        "passed": "passed",
        "failed": "failure",
        "absent": "skipped",
        "not-checkable": "skipped",
        "error": "error",
    }


def test_a_drill_verdict_reads_and_compares_as_its_stored_text() -> None:
    outcome = DrillOutcome(DrillVerdict.NOT_CHECKABLE, {})
    assert outcome.verdict == "not-checkable" and outcome.verdict.value == "not-checkable"
    assert DrillVerdict("passed") is DrillVerdict.PASSED
