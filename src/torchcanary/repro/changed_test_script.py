"""The writer for a changed test (kind ``test``): the test run alone with pytest, in the
project's folder, with the variables the run gave it; the script prints its outcome first
(``passed``, ``failed``, ``skipped``, ``error``), then pytest's last lines.

The failing frame's call is not yet cut out of the traceback into a torch-only script: the
traceback, where the run kept one, goes into ``ISSUE.md``."""

from __future__ import annotations

from torchcanary.repro.reproducer import ROLES, Reproducer
from torchcanary.section_types import Finding

_SCRIPT = '''\
"""{test}: {baseline} in the baseline, {candidate} in the candidate.

Needs the project and pytest installed in each version ({installed}), and torchcanary
where the tests import it; runs the test alone in {cwd}."""
import os
import re
import subprocess
import sys

TEST = {test!r}
done = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", TEST],
    cwd={cwd!r},
    env={{**os.environ, **{env!r}}},
    capture_output=True,
    text=True,
)
lines = done.stdout.splitlines() or [""]
counts = re.findall(r"(\\d+) (passed|failed|skipped|error)", lines[-1])
print(counts[0][1] if counts else f"did not run (exit {{done.returncode}})")
print("\\n".join(lines[-12:]), done.stderr[-2000:], sep="\\n")
'''


def changed_test_reproducer(finding: Finding) -> Reproducer:
    """The script that runs one changed test again, in the interpreters the suite ran in."""
    facts = finding.facts
    sides = {role: facts[role] for role in ROLES}
    outcomes = {role: sides[role]["outcome"] for role in ROLES}
    script = _SCRIPT.format(
        test=facts["test"],
        cwd=facts["cwd"],
        env=facts["env"],
        installed=", ".join(facts["installed"]) or "pytest",
        **outcomes,
    )
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=f"{facts['test']}: {outcomes['baseline']} in the baseline, "
        f"{outcomes['candidate']} in the candidate",
        script=script,
        observed={
            role: f"{sides[role]['outcome']}: {sides[role]['message']}".rstrip(": ")
            for role in ROLES
        },
        expects=outcomes,
        facts=dict(facts),
        pythons=dict(facts.get("pythons", {})),
        paths=(facts["cwd"],),
        importable=("torchcanary",),  # the run had it on PYTHONPATH (its numerics API)
    )
