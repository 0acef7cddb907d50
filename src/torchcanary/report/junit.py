"""JUnit XML: one test case per claim and environment, plus what other sections add.

CI systems render this natively, so a no-go shows up where engineers already look.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree

from torchcanary.policy import headline
from torchcanary.section_types import JUnitCase, RunView
from torchcanary.sections import get_section


def _decision_case(view: RunView) -> JUnitCase:
    """The run's go / no-go as one case, so CI fails exactly when the exit status says no-go,
    for every reason the policy gave (a section that did not run included)."""
    reasons = "\n".join((view.run.decision_detail or {}).get("reasons", []))
    if view.run.decision is None:
        return JUnitCase("torchcanary", "decision", "skipped", message="the run did not finish")
    if view.run.decision == "go":
        warnings = (view.run.decision_detail or {}).get("warnings", [])
        go = headline(view.run.decision, view.run.decision_detail)
        said = f"{go}, with {len(warnings)} warning(s) the policy lets through"
        output = "\n".join([said, *warnings]) if warnings else ""
        return JUnitCase("torchcanary", "decision", "passed", message=go, output=output)
    first = reasons.splitlines()[0] if reasons else ""
    return JUnitCase("torchcanary", "decision", "failure", message=f"no-go: {first}", text=reasons)


def render_junit(
    view: RunView, sections: tuple[str, ...], extra_cases: Sequence[JUnitCase] = ()
) -> str:
    """``extra_cases`` come after the sections' own (a fleet run's per-profile cases)."""
    root = ElementTree.Element("testsuites", name=f"torchcanary {view.run.run_id}")
    cases = [_decision_case(view)]
    for section in sections:
        cases += get_section(section).junit_cases(view)
    cases += extra_cases
    suites: dict[str, list[JUnitCase]] = {}
    for case in cases:
        suites.setdefault(case.suite, []).append(case)
    for suite_name, suite_cases in suites.items():
        suite = ElementTree.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(suite_cases)),
            failures=str(sum(c.status == "failure" for c in suite_cases)),
            errors=str(sum(c.status == "error" for c in suite_cases)),
            skipped=str(sum(c.status == "skipped" for c in suite_cases)),
        )
        for case in suite_cases:
            element = ElementTree.SubElement(
                suite, "testcase", classname=suite_name, name=case.name, time=f"{case.time_s:.3f}"
            )
            if case.status != "passed":
                child = ElementTree.SubElement(element, case.status, message=case.message[:500])
                child.text = case.text
            if case.output:
                ElementTree.SubElement(element, "system-out").text = case.output
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)
