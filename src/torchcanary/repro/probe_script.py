"""The writer for a regressed or refuted claim (kind ``probe``): the probe's own module as
a standalone script, torchcanary's probe API replaced by the few lines a probe uses; it
runs the probe on the CPU and prints its verdict and summary first."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from torchcanary.repro.literals import NotWritable
from torchcanary.repro.reproducer import ROLES, Reproducer
from torchcanary.section_types import Finding

# the modules a probe takes its API from, replaced by _API; any other of torchcanary's
# (the probes' helpers, the multi-rank runner) makes the probe not writable alone
_REPLACED = ("torchcanary.probe", "torchcanary.probe_result")

_API = """\
# -- torchcanary's probe API, as much of it as a probe uses --------------------------------
class Verdict(str, enum.Enum):
    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    ABSENT = "absent"
    NOT_CHECKABLE = "not-checkable-here"


@dataclasses.dataclass
class Outcome:
    verdict: Verdict
    summary: str
    evidence: dict = dataclasses.field(default_factory=dict)
    measurements: dict = dataclasses.field(default_factory=dict)


def confirmed(summary, **evidence):
    return Outcome(Verdict.CONFIRMED, summary, evidence)


def refuted(summary, **evidence):
    return Outcome(Verdict.REFUTED, summary, evidence)


def absent(summary, **evidence):
    return Outcome(Verdict.ABSENT, summary, evidence)


def not_checkable(summary, **evidence):
    return Outcome(Verdict.NOT_CHECKABLE, summary, evidence)


@dataclasses.dataclass
class Needs:
    devices: tuple = ()
    packages: tuple = ()
    ranks: int = 1


@dataclasses.dataclass
class ProbeContext:
    scratch_dir: str
    devices: tuple
    params: dict = dataclasses.field(default_factory=dict)


class Probe:
    def __init__(self, id, claim, scope, run, **options):
        self.id, self.claim, self.run = id, claim, run


"""

_MAIN = """

# -- run it ---------------------------------------------------------------------------------
if __name__ == "__main__":
    (probe,) = [p for p in PROBES if p.id == {probe!r}]
    with tempfile.TemporaryDirectory() as scratch:
        outcome = probe.run(ProbeContext(scratch, ("cpu",)))
    print(f"{{Verdict(outcome.verdict).value}}: {{outcome.summary}}")
"""


def probe_reproducer(finding: Finding) -> Reproducer:
    """The probe's module as a script that runs that probe; ``NotWritable`` when its
    module cannot be read or needs more of torchcanary than the probe API."""
    facts = finding.facts
    sides = {role: facts[role] for role in ROLES}
    title = (
        f"{facts['probe']} ({facts['claim']}): {sides['baseline']['verdict']} in the baseline, "
        f"{sides['candidate']['verdict']} in the candidate"
    )
    header = f'"""{title}"""\nfrom __future__ import annotations\n\n'
    imports = "import dataclasses\nimport enum\nimport tempfile\n\n"
    body = standalone_source(facts["module"])
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=title,
        script=header + imports + _API + body + _MAIN.format(probe=facts["probe"]),
        observed={role: f"{s['verdict']}: {s['summary']}" for role, s in sides.items()},
        expects={role: f"{s['verdict']}:" for role, s in sides.items()},
        facts=dict(facts),
    )


def standalone_source(module: str) -> str:
    """The module's source without its imports of the probe API (and its ``__future__``
    import, which the script makes first)."""
    spec = importlib.util.find_spec(module) if module else None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise NotWritable(f"the probe's module {module!r} cannot be read here")
    source = Path(spec.origin).read_text()
    lines = source.splitlines()
    dropped: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [alias.name for alias in node.names]
        )
        if any(name.startswith("torchcanary") and name not in _REPLACED for name in names):
            raise NotWritable(f"the probe's module imports {', '.join(names)} beside the API")
        if node in tree.body and any(name in _REPLACED or name == "__future__" for name in names):
            dropped |= set(range(node.lineno - 1, (node.end_lineno or node.lineno)))
    return "\n".join(line for index, line in enumerate(lines) if index not in dropped) + "\n"
