"""What a reproducer is, and what running it again in both versions showed."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

ROLES = ("baseline", "candidate")


@dataclass(frozen=True)
class Reproducer:
    """One finding as a standalone script.

    ``observed``: what each version did in the run (``expected.txt``); ``expects``: how the
    first line the script prints starts in each version when the change shows (a script
    prints its outcome first: ``returns ...``, ``raises RuntimeError: ...``, ``slower ...``).
    """

    finding: str  # "<section>:<item>", the key the report links by
    title: str
    script: str
    observed: dict[str, str]
    expects: dict[str, str]
    facts: dict[str, Any] = field(default_factory=dict)  # the finding's, for ISSUE.md
    # True: the script takes both interpreters and compares them itself (a timing), run
    # once; ``expects["both"]`` is how its first line starts. False: run in each version.
    runs_both: bool = False
    # role -> the interpreter to run it with, where the finding needs more than torch (the
    # suite's overlay, with the project and pytest); the run's environment otherwise
    pythons: dict[str, str] = field(default_factory=dict)
    paths: tuple[str, ...] = ()  # folders of the run's it needs (a project's)
    # torchcanary's own packages it needs importable, as the run had them (a user's tests
    # may call ``torchcanary.numerics.record``): put on PYTHONPATH when it is run again
    importable: tuple[str, ...] = ()
    # files written beside the script, by their path in its folder (a drill's job)
    files: dict[str, str] = field(default_factory=dict)
    # seconds the script bounds its own work by (a drill: the drill's bound), which a run
    # of it is given beyond any shorter limit
    bound_s: float = 0.0

    def lines(self) -> int:
        return len(self.script.strip().splitlines())


class Reproduces(str, enum.Enum):
    """The one verdict on a reproducer run again in both environments."""

    YES = "reproduces"
    NO = "does not reproduce"
    NOT_CHECKED = "not checked"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verification:
    """The verdict with why, each version's output (stdout: what the verdict reads) and,
    for a version where the script failed, the end of its stderr."""

    verdict: Reproduces
    outputs: dict[str, str]
    reason: str
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "reason": self.reason,
            "outputs": self.outputs,
            "errors": self.errors,
        }


def judge(reproducer: Reproducer, outputs: dict[str, str], exits: dict[str, int]) -> Verification:
    """It reproduces when each version's first line starts as ``expects`` says and the two
    outputs differ (a script that runs both: when its one first line does); a script that
    crashed (a non-zero exit) shows nothing."""
    if reproducer.runs_both:
        return _judge_both(reproducer, outputs["both"], exits["both"])
    crashed = [role for role in ROLES if exits.get(role) != 0]
    if crashed:
        reason = ", ".join(f"exit {exits.get(role)} in the {role}" for role in crashed)
        return Verification(Reproduces.NO, outputs, f"the script failed: {reason}")
    firsts = {role: (outputs[role].splitlines() or [""])[0] for role in ROLES}
    off = [
        f"the {role} printed {firsts[role][:120]!r}, not {reproducer.expects[role]!r}..."
        for role in ROLES
        if not firsts[role].startswith(reproducer.expects[role])
    ]
    if off:
        return Verification(Reproduces.NO, outputs, "; ".join(off))
    if outputs["baseline"] == outputs["candidate"]:
        return Verification(Reproduces.NO, outputs, "both versions printed the same")
    return Verification(
        Reproduces.YES,
        outputs,
        f"baseline: {firsts['baseline'][:120]}; candidate: {firsts['candidate'][:120]}",
    )


def _judge_both(reproducer: Reproducer, output: str, exit_code: int) -> Verification:
    outputs = {"both": output}
    if exit_code != 0:
        return Verification(Reproduces.NO, outputs, f"the script failed: exit {exit_code}")
    first = (output.splitlines() or [""])[0]
    if not first.startswith(reproducer.expects["both"]):
        wanted = reproducer.expects["both"]
        return Verification(Reproduces.NO, outputs, f"it printed {first!r}, not {wanted!r}...")
    return Verification(Reproduces.YES, outputs, first)
