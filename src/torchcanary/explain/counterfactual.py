"""Settings, counterfactually: which setting, set back to the baseline's value, restores
the baseline's speed, and by how much.

Every runtime setting that differs between the two environments (``worker/explain/
settings.py`` reads them: thread counts, the threading layer, backend flags, matmul
precision, the CPU capability, the environment variables torch reads) is a candidate
cause. The regressed item is measured again in workers of its own, round by round in a
random order: the baseline (B), the candidate (C), and the candidate with each candidate
cause set back (C+x), one at a time, then the ones that recovered most, together. A cause's
share is ``mean ln(C / C+x) / mean ln(C / B)`` over the rounds (1.0: restoring it restores
the baseline's speed), with its Fieller interval (``shares``); what the best combination
does not recover is "unexplained". Nothing is shared out unless these rounds reproduced the
change (``ln(C / B)``'s interval excludes 0): a share of a change not seen is no number.
Each arm's effect is then judged against that reproduced change in the same rounds
(:func:`effect`): it *undoes* the change only where ``ln(C+x / B)``'s interval holds 0 and
its share is material (``shares.MATERIAL``), *reduces* it where the share is material but a
change is left, and otherwise is named with what it measured, as no cause.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from torchcanary.context import ROLES
from torchcanary.envs.worker_env import compile_env
from torchcanary.explain import shares
from torchcanary.explain.cause import Cause
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.explain.remeasure import compiled, remeasure_of
from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import STARTUP
from torchcanary.worker.calls import EXPLAIN_REMEASURE, EXPLAIN_SETTINGS

_TOGETHER = "together"
MIN_ROUNDS = 3  # the fewest rounds a share is drawn from
_MAX_ARMS = 8  # settings set back one at a time per finding; the rest are named, not run


@dataclass(frozen=True)
class Arm:
    """One way to run the item: an environment and what is set back in it."""

    name: str
    role: str
    env: dict[str, str | None] = field(default_factory=dict)
    python: dict[str, Any] = field(default_factory=dict)


def differing(snapshots: dict[str, dict[str, Any]]) -> tuple[dict[str, Arm], list[str]]:
    """The candidate causes as arms (one per setting set back), and the settings that
    differ but cannot be set back (with their two values)."""
    base, cand = snapshots["baseline"], snapshots["candidate"]
    arms: dict[str, Arm] = {}
    fixed: list[str] = []
    for name in sorted({*base, *cand}):
        before, after = base.get(name, {}), cand.get(name, {})
        if before.get("value") == after.get("value"):
            continue
        how = (after or before).get("how")
        if how == "env" and name.startswith("env:"):
            arms[name] = Arm(name, "candidate", env={name[4:]: before.get("value")})
        elif how == "env" and after.get("variable"):
            value = before.get("value")
            env_value = str(value).lower() if value is not None else None
            arms[name] = Arm(name, "candidate", env={after["variable"]: env_value})
        elif how == "python" and "value" in before:
            arms[name] = Arm(name, "candidate", python={name: before["value"]})
        else:
            fixed.append(f"{name}: {before.get('value')!r} -> {after.get('value')!r}")
    return _one_arm_per_variable(arms), fixed


def _one_arm_per_variable(arms: dict[str, Arm]) -> dict[str, Arm]:
    """A setting read from an environment variable that differs too (the CPU capability and
    ``ATEN_CPU_CAPABILITY``) is one cause, not two: one arm, named for the setting, that puts
    the variable back as the baseline has it (unset there: unset)."""
    for name, arm in list(arms.items()):
        if name.startswith("env:"):
            continue
        for variable in arm.env:
            same = arms.pop(f"env:{variable}", None)
            if same is not None:
                arms[name] = Arm(name, arm.role, env=same.env, python=arm.python)
    return arms


def config_arms(changes: list[Finding]) -> dict[str, Arm]:
    """The flipped config defaults the diff found, each as an arm setting it back."""
    arms = {}
    for change in changes:
        symbol, value = str(change.facts.get("symbol", "")), change.facts.get("baseline")
        module = symbol.rpartition(".")[0]
        plain = isinstance(value, bool | int | float) or (
            isinstance(value, str) and not value.startswith("<")
        )
        if change.facts.get("change") == "default-changed" and ".config" in module and plain:
            name = f"config:{symbol}"
            arms[name] = Arm(name, "candidate", python={name: value})
    return arms


def _together(arms: list[Arm]) -> Arm:
    env: dict[str, str | None] = {}
    python: dict[str, Any] = {}
    for arm in arms:
        env |= arm.env
        python |= arm.python
    return Arm(_TOGETHER, "candidate", env, python)


def _cold_compiles(
    job: ExplainJob, finding: Finding, env_of: dict[str, dict[str, str]]
) -> dict[str, dict[str, str]]:
    """For compiled code, every worker compiles afresh (Inductor's caches off, in one scratch
    folder both roles share, so the variables read the same on both sides and are no
    candidate cause): an arm that sets a config value back must compile with it."""
    if not compiled(finding):
        return env_of
    cold = compile_env(str(job.ctx.work_dir / "explain-settings"))
    return {role: {**cold, **env_of.get(role, {})} for role in ROLES}


def _settings(job: ExplainJob, env_of: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    found = {}
    for role in ROLES:
        result = job.ctx.new_worker(role, env_vars=env_of.get(role)).call(
            EXPLAIN_SETTINGS, {}, timeout_s=120
        )
        if not result.ok:
            raise RuntimeError(f"reading the {role}'s settings: {result.error}")
        found[role] = dict(result.value)
    return found


@dataclass
class _Rounds:
    """Each arm's value per round (seconds), measured in a fresh worker per arm and round.

    A worker kept across rounds carries its own offset (where its buffers landed, which
    core's caches it warmed) into every round, and an interval over rounds cannot see
    it: with kept workers a setting's 95 % interval missed the truth about one run in
    four. Fresh workers make that offset part of the rounds' spread; their start (python,
    the settings, torch's import) overlaps for all arms of a round, before any is timed.
    """

    job: ExplainJob
    remeasure: dict[str, Any]
    env_of: dict[str, dict[str, str]]
    values: dict[str, list[float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def take(self, arms: list[Arm], rounds: int) -> None:
        """``rounds`` rounds of every arm in a random order, none started that the last
        one's duration says would end past the budget; an arm that fails is dropped
        (``failed``), the baseline or the candidate failing ends the measurement."""
        rng = random.Random(31)
        last_round_s = 0.0
        for _ in range(rounds):
            if self.job.seconds_left() < last_round_s:
                return
            started = time.monotonic()
            live = [arm for arm in arms if arm.name not in self.failed]
            workers = self._ready(live)
            try:
                for arm in rng.sample(live, len(live)):
                    try:
                        self.values.setdefault(arm.name, []).append(self._one(arm, workers))
                    except RuntimeError as exc:
                        if arm.role == arm.name:  # baseline or candidate itself
                            raise
                        self.failed[arm.name] = str(exc)[:200]
                        self.values.pop(arm.name, None)
            finally:
                for worker in workers.values():
                    worker.close()
            last_round_s = time.monotonic() - started

    def _ready(self, arms: list[Arm]) -> dict[str, Any]:
        """A fresh worker per arm, its settings applied and torch imported, all at once."""
        workers = {a.name: self.job.ctx.new_worker(a.role, self.env_of.get(a.role)) for a in arms}

        def ready(arm: Arm) -> None:
            kwargs = {"target": "", "kwargs": {}, "env": arm.env, "python": arm.python}
            workers[arm.name].call(EXPLAIN_REMEASURE, kwargs, timeout_s=self.job.call_timeout_s())

        with ThreadPoolExecutor(max_workers=len(arms) or 1) as pool:
            list(pool.map(ready, arms))  # a failure shows again in the timed call
        return workers

    def _one(self, arm: Arm, workers: dict[str, Any]) -> float:
        kwargs = _arguments(self.remeasure, arm)
        result = workers[arm.name].call(
            EXPLAIN_REMEASURE, kwargs, timeout_s=self.job.call_timeout_s()
        )
        if not result.ok or "seconds" not in result.value:
            raise RuntimeError(f"{arm.name}: {result.error or result.value.get('error')}")
        return float(result.value["seconds"])

    def slowdown(self) -> shares.Interval | None:
        """``ln(C / B)``, the slowdown these rounds measured, with its t interval."""
        pairs = zip(self.values["baseline"], self.values["candidate"], strict=False)
        return shares.mean([math.log(cand / base) for base, cand in pairs])

    def change_with(self, arm: str) -> shares.Interval | None:
        """``ln(C+arm / B)``: the change left with ``arm`` set back, in the same rounds."""
        pairs = zip(self.values["baseline"], self.values[arm], strict=False)
        return shares.mean([math.log(fixed / base) for base, fixed in pairs])

    def share(self, arm: str) -> shares.Interval | None:
        """``ln(C / C+arm) / ln(C / B)`` over the rounds all three were measured in."""
        rows = list(
            zip(self.values["baseline"], self.values["candidate"], self.values[arm], strict=False)
        )
        recovered = [math.log(cand / fixed) for _, cand, fixed in rows]
        return shares.ratio(recovered, [math.log(cand / base) for base, cand, _ in rows])


def counterfactual(
    job: ExplainJob, finding: Finding, env_of: dict[str, dict[str, str]] | None = None
) -> Contribution:
    """The candidate causes of ``finding`` among the settings, each set back on its own and
    the best together. ``env_of`` adds environment variables to a role's workers (how a
    test builds an environment that differs by one setting)."""
    remeasure = remeasure_of(finding)
    assert remeasure is not None
    env_of = _cold_compiles(job, finding, env_of or {})
    arms, fixed = differing(_settings(job, env_of))
    if compiled(finding):  # config values only change compiled code
        arms |= config_arms(job.changes)
    not_checked = [f"{line} (a property of the build: cannot be set back)" for line in fixed]
    if finding.facts.get("kind") == STARTUP:
        # A start-up is timed in a fresh child that inherits the environment only; a
        # python-level setting is made after torch's import, so it cannot move that time.
        inside = sorted(name for name, arm in arms.items() if arm.python)
        not_checked += [
            f"{name}: not tried: set inside the interpreter after import torch, so it "
            "cannot move a start-up time"
            for name in inside
        ]
        arms = {name: arm for name, arm in arms.items() if name not in inside}
    threads = (remeasure.get("kwargs") or {}).get("threads")
    if threads is not None and "num_threads" in arms:
        # The measurement pins the thread count on both sides, as the bench ran it.
        arms.pop("num_threads")
        not_checked.append(
            f"num_threads: not tried: this finding is measured at {threads} thread(s) on both "
            "sides (as the bench ran it), so the default thread count cannot move it"
        )
    if len(arms) > _MAX_ARMS:
        left = sorted(arms)[_MAX_ARMS:]
        not_checked.append(
            f"settings: {len(left)} more not set back (at most {_MAX_ARMS}): {', '.join(left)}"
        )
        arms = {name: arms[name] for name in sorted(arms)[:_MAX_ARMS]}
    if not arms:
        return Contribution(
            not_checked=(*not_checked, "settings: no setting that can be set back differs")
        )
    measured = _Rounds(job, remeasure, env_of)
    plain = [Arm("baseline", "baseline"), Arm("candidate", "candidate")]
    measured.take([*plain, *arms.values()], job.settings.rounds)
    not_checked += [
        f"{name}: could not be set back: {why}" for name, why in measured.failed.items()
    ]
    held = len(measured.values.get("baseline", []))
    if held < MIN_ROUNDS:
        return Contribution(
            not_checked=(
                *not_checked,
                f"settings: not explained: the budget held {held} round(s), {MIN_ROUNDS} are "
                "the fewest a share is drawn from",
            )
        )
    slowdown = measured.slowdown()
    with_arm = {name: measured.change_with(name) for name in arms if name not in measured.failed}
    extra = {
        "settings": {
            "slowdown": _ratio(slowdown),
            "rounds": held,
            "with_arm": {name: _ratio(i) for name, i in with_arm.items()},
        }
    }
    if slowdown is None or slowdown[1] <= 0 <= slowdown[2]:
        not_checked.append(
            f"settings: these rounds did not reproduce the change (candidate/baseline "
            f"{_ratio_words(slowdown)} over {held} rounds): no share is shown; with each "
            "setting set back they measured "
            + "; ".join(f"{name} {_ratio_words(i)}" for name, i in with_arm.items())
        )
        return Contribution(not_checked=tuple(not_checked), extra=extra)
    intervals = {name: measured.share(name) for name in with_arm}
    helping = [arms[n] for n, i in intervals.items() if shares.material(i)]
    best = max((i for i in intervals.values() if i is not None), key=lambda i: i[0], default=None)
    if len(helping) > 1 and job.seconds_left() > 0:
        arms[_TOGETHER] = _together(helping)
        measured.values = {}  # the combination is judged against rounds of its own
        measured.take([*plain, arms[_TOGETHER]], job.settings.rounds)
        if len(measured.values.get(_TOGETHER, [])) >= MIN_ROUNDS:
            intervals[_TOGETHER] = measured.share(_TOGETHER)
            with_arm[_TOGETHER] = measured.change_with(_TOGETHER)
            best = intervals[_TOGETHER] or best
    effects = {name: effect(intervals[name], with_arm[name]) for name in intervals}
    causes = [
        _cause(job, finding, name, arms[name], intervals[name], with_arm[name], effects[name])
        for name in intervals
    ]
    unexplained = (1 - best[0], 1 - best[2], 1 - best[1]) if best is not None else None
    return Contribution(
        tuple(c for c in causes if c is not None), unexplained, tuple(not_checked), extra=extra
    )


UNDOES = "undoes"  # with the arm, the candidate's change holds 0 (and the arm moved it)
REDUCES = "reduces"  # the arm recovers a material share, but a change is left
NO_EFFECT = "none"  # neither: what the arm measured is said, no cause is claimed


def effect(share: shares.Interval | None, left: shares.Interval | None) -> str:
    """What setting an arm back did to the reproduced change, judged in the same rounds.

    It undoes the change only where the candidate's change with it holds 0 *and* its share
    is material (a noisy arm's wide interval can hold 0 without having moved anything); it
    reduces it where the share is material but a change is left; otherwise it did neither.
    """
    if not shares.material(share):
        return NO_EFFECT
    if left is not None and left[1] <= 0.0 <= left[2]:
        return UNDOES
    return REDUCES


def _ratio(log_interval: shares.Interval | None) -> list[float] | None:
    """A t interval of ``ln(C / B)`` as candidate/baseline time ratios (None stays None)."""
    return [math.exp(v) for v in log_interval] if log_interval is not None else None


def _ratio_words(log_interval: shares.Interval | None) -> str:
    ratio = _ratio(log_interval)
    if ratio is None:
        return "not measured"
    return f"x{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}]"


def _reproduce(job: ExplainJob, finding: Finding, arm: Arm) -> str:
    """The command that takes one sample of the candidate with ``arm``'s settings set back."""
    remeasure = remeasure_of(finding)
    assert remeasure is not None
    call = (
        "import json; from torchcanary.worker.explain.remeasure import measure; "
        f"print(measure(**json.loads({json.dumps(_arguments(remeasure, arm))!r})))"
    )
    python = job.ctx.environments["candidate"].python
    return f"PYTHONPATH={shlex.quote(str(job.ctx.import_root))} {python} -c {shlex.quote(call)}"


def _arguments(remeasure: dict[str, Any], arm: Arm) -> dict[str, Any]:
    return {
        "target": remeasure["call"],
        "kwargs": remeasure.get("kwargs", {}),
        "env": arm.env,
        "python": arm.python,
    }


def _cause(
    job: ExplainJob,
    finding: Finding,
    name: str,
    arm: Arm,
    interval: shares.Interval | None,
    left: shares.Interval | None,
    what: str,
) -> Cause | None:
    if interval is None:
        return None
    set_back = ", ".join(
        [f"{k}={'(unset)' if v is None else v}" for k, v in arm.env.items()]
        + [f"{k}={v!r}" for k, v in arm.python.items()]
    )
    share, low, high = interval
    measured = f"with it the candidate measured {_ratio_words(left)} of the baseline"
    verdict = {
        UNDOES: f"it undoes the change ({measured}): go, with it pinned to the baseline's value",
        REDUCES: f"it reduces the change by a material share, not all of it ({measured})",
        NO_EFFECT: f"not the cause: it does not undo the change ({measured})",
    }[what]
    return Cause(
        "settings" if name == _TOGETHER else "setting",
        "the best ones together" if name == _TOGETHER else name,
        share,
        low,
        high,
        evidence=f"restoring {set_back} recovers {share:.0%} [{low:.0%}, {high:.0%}] "
        f"of the loss; {verdict}",
        reproduce=_reproduce(job, finding, arm),
        detail={
            "set_back": {"env": arm.env, "python": arm.python},
            "effect": what,
            "with_arm": _ratio(left),
        },
    )


def applies(finding: Finding) -> bool:
    return finding.kind == "timing" and remeasure_of(finding) is not None


EXPLAINER: Explainer = FunctionExplainer("settings", applies, counterfactual)
