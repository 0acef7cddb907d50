"""Repeated trials of a drill: when to repeat, how trials make one verdict, and when the two
torch versions are said to differ.

Orchestrator side. One drill is one trial of a job sharing the machine with others; a
restart through torchrun's shared store, or a gloo connection under load, fails by luck in
either version now and then. One trial cannot tell that luck from a version difference, so:

- each drill runs ``trials`` times in each environment [1];
- where the environments disagree (one passed every trial, the other failed or errored in
  one: :func:`disagree`), both run it again until each has ``disagreement_trials`` trials
  [3]; ``absent`` and ``not-checkable`` are facts of the version or machine, not repeated;
- the trials make one verdict (:func:`combined_verdict`): theirs when they agree, ``flaky``
  when some passed and some did not, else ``failed`` when one failed;
- a difference between the versions is claimed (:func:`compare`), and a
  regression blocks, only when one environment passed all of its n trials and the other
  none of its n. If both versions passed each trial with the same probability p, whatever
  p is, that happens by luck with probability p^n (1-p)^n <= 4^-n in a given direction:
  at most 1 in 64 per drill at n = 3. Anything less one-sided (3 of 3 against 1 of 3) is
  shown, with each failure's first error, and claims nothing. With ``disagreement_trials =
  1`` one trial decides, as it did before drills were repeated (and as rows stored before
  then read: one trial each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchcanary.drill.drill import DrillOutcome
from torchcanary.drill.result import DrillRun, DrillVerdict

MAX_TRIALS = 10
# Verdicts that say a trial ran and did not pass: what luck can cause, so worth repeating.
_MISSES = (DrillVerdict.FAILED, DrillVerdict.ERROR)


def disagree(first: Sequence[DrillVerdict], second: Sequence[DrillVerdict]) -> bool:
    """Whether one environment passed every trial and the other missed one (failed, error)."""

    def all_passed(verdicts: Sequence[DrillVerdict]) -> bool:
        return bool(verdicts) and all(v is DrillVerdict.PASSED for v in verdicts)

    def missed(verdicts: Sequence[DrillVerdict]) -> bool:
        return any(v in _MISSES for v in verdicts)

    return (all_passed(first) and missed(second)) or (all_passed(second) and missed(first))


def combined_verdict(verdicts: Sequence[DrillVerdict]) -> DrillVerdict:
    """One verdict for a drill's trials in one environment (see the module docstring)."""
    if len(set(verdicts)) == 1:
        return verdicts[0]
    if DrillVerdict.PASSED in verdicts:
        return DrillVerdict.FLAKY
    return DrillVerdict.FAILED if DrillVerdict.FAILED in verdicts else verdicts[0]


def trial_summary(verdict: DrillVerdict, payload: Mapping[str, Any]) -> dict[str, Any]:
    """What a row keeps of each trial: its verdict, why, the job's first error, how long."""
    return {
        "verdict": verdict.value,
        "reason": payload.get("reason"),
        "first_error": payload.get("first_error"),
        "duration_s": payload.get("duration_s"),
    }


def combine(outcomes: Sequence[DrillOutcome]) -> DrillOutcome:
    """A drill's trials in one environment as one row: the combined verdict, and the payload
    of its first trial that did not pass (the one worth reading; else its first trial)
    with ``trials`` added and, after several trials, a reason naming each trial's failure."""
    verdict = combined_verdict([outcome.verdict for outcome in outcomes])
    trials = [trial_summary(outcome.verdict, outcome.payload) for outcome in outcomes]
    shown = next((o for o in outcomes if o.verdict is not DrillVerdict.PASSED), outcomes[0])
    payload = {**shown.payload, "trials": trials}
    if len(trials) > 1:
        payload["reason"] = describe_trials(trials)
    return DrillOutcome(verdict, payload)


def describe_trials(trials: Sequence[Mapping[str, Any]]) -> str:
    """Each trial that did not pass with its first error (``trial 2 failed: ...; trial 3
    error: ...``), or, when all passed, the first trial's reason. The count, ``k of n``, is
    the reports' to show beside the verdict."""
    misses = [
        f"trial {index} {trial.get('verdict')}: {failure_text(trial)[:240]}"
        for index, trial in enumerate(trials, 1)
        if trial.get("verdict") != DrillVerdict.PASSED.value
    ]
    return "; ".join(misses) if misses else str(trials[0].get("reason") or "")


def failure_text(trial: Mapping[str, Any]) -> str:
    """A trial's first error as the job raised it, else the drill's reason."""
    return str(trial.get("first_error") or trial.get("reason") or "no reason recorded")


@dataclass(frozen=True)
class Comparison:
    """A drill's trials in the two environments, and the difference they support."""

    counts: str  # "passed 3 of 3 trials in the baseline and 0 of 3 in the candidate"
    # The environment that passed every trial where the other passed none: the difference
    # claimed. None: the trials claim no difference.
    better: str | None

    def describe(self) -> str:
        if self.better is None:
            return (
                f"{self.counts}: no difference claimed (that needs every trial of one "
                "environment to pass and none of the other's)"
            )
        return f"{self.counts}: the {self.better} does better, a difference the trials support"


# The trials that said something of the version: an error (the fault never struck) or a
# "not checkable here" (the machine's doing) says nothing, whichever version it met.
_JUDGED = frozenset(
    v.value for v in (DrillVerdict.PASSED, DrillVerdict.FAILED, DrillVerdict.ABSENT)
)


def judged_trials(run: DrillRun) -> tuple[int, int]:
    """``(passed, judged)``: of ``run``'s trials, those that passed and those that ran to a
    verdict on the version (passed, failed, absent)."""
    verdicts = [str(t.get("verdict")) for t in run.trials or ({"verdict": run.verdict.value},)]
    judged = [v for v in verdicts if v in _JUDGED]
    return judged.count(DrillVerdict.PASSED.value), len(judged)


def compare(baseline: DrillRun, candidate: DrillRun) -> Comparison:
    """The two environments' trials of one drill, by the rule in the module docstring: only
    trials that ran to a verdict on the version count, so a drill not checkable (or that
    errored) in one version only claims no difference."""
    counts = {"baseline": judged_trials(baseline), "candidate": judged_trials(candidate)}
    text = (
        f"passed {counts['baseline'][0]} of {counts['baseline'][1]} trials in the baseline "
        f"and {counts['candidate'][0]} of {counts['candidate'][1]} in the candidate"
    )
    for better, worse in (("baseline", "candidate"), ("candidate", "baseline")):
        (won, ran), (lost, judged) = counts[better], counts[worse]
        if ran and judged and won == ran and lost == 0:
            return Comparison(text, better)
    return Comparison(text, None)
