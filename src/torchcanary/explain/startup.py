"""Why ``import torch`` got slower (or faster): the import split into the shared libraries
each build loads and the rest, measured in both environments; which modules and libraries
account for the delta; and how much of it the candidate build's own libraries are.

Measured in fresh interpreters of their own (``worker/explain/startup.py``), round by round,
the two environments' children of a kind at the same time (one per CPU, each timed on its
own CPU clock), never mixed into the bench's samples:

- ``plain`` rounds time ``import torch`` as the bench does: the delta to explain;
- ``preload`` rounds open each shared library the import loads, one by one, then import
  torch: each library's loading and the rest (Python modules, initialisation), per side;
- one ``-X importtime`` run per side names the modules and the libraries (with sizes).

The split is of the import's CPU time (the child process's, all threads), not its wall
time. On a shared machine the wall time of one import moves by seconds with what else
runs (measured: a round's wall change had a spread of 1-2 s against a change of 0.3 s),
and that noise landed on whichever phase was running, mostly on "the rest of the import",
the longest one; CPU time moved about a tenth as much, the loading of the build's own
libraries a hundredth. The wall change of the same rounds is shown beside it.

The change is split in the ``preload`` children: each one's CPU time is its libraries'
loading plus the rest of its import, so the parts (the candidate build's own libraries,
the rest of the import, the libraries both load, those only the baseline loads) add up to
that child's whole import by construction and nothing is left unexplained. Nothing is
shared out unless that whole reproduces the finding (its t interval excludes 0, on the
finding's side) and the ``plain`` children of the same rounds are not told apart from it
(the t interval of their difference holds 0: preloading did not change what is split).
Both are decided on the split children, not the plain ones: on an idle machine the plain
import's change measured +/-300 ms over 5 rounds, the split children's libraries +/-22 ms
and rest +/-170 ms, and the plain change as the denominator gave an "unexplained" of -103
% in one run and no shares in the next. A part leads only when its per-round change is
told apart from each other one's (the 99 % t interval of their difference excludes 0);
parts that are not are named as leading together, in the order above, so a near tie reads
the same in every run instead of following the noise. Single libraries and modules overlap
those parts (a module's time holds the libraries it loads) and are shown as detail inside
their part. A library is matched across builds by its file name without the wheel's hash.
"The build's own libraries" are those only the candidate loads (a CUDA build's
``nvidia/*``, ``libtorch_cuda``...): nothing is read from a version number.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import PurePath
from typing import Any

from torchcanary.context import ROLES
from torchcanary.explain import shares
from torchcanary.explain.cause import Cause, share_text
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.explain.ops import both_sides
from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import STARTUP
from torchcanary.worker.calls import EXPLAIN_STARTUP

_HASH = re.compile(r"-[0-9a-f]{8}(?=[.-])")
_TOP_MODULES = 6
MIN_ROUNDS = 3  # the fewest rounds shares are drawn from
_TOP_LIBRARIES = 8
# How sure a part must be that it is ahead of each other part to lead alone: it is picked
# as the largest of several, and two runs must agree (at 95 % two runs of a near tie named
# different leading parts 7 % of the time in simulation, at 99 % under 2 %:
# benchmarks/explain_startup_lead.py).
LEAD = 0.99
_CUDA_PARTS = ("nvidia", "cuda", "cudnn", "cublas", "nccl", "nvshmem", "cufft", "curand")
Round = dict[str, Any]


def library_name(path: str) -> str:
    """A library's name across builds: its file name without the wheel's hash."""
    return _HASH.sub("", PurePath(path).name)


def is_cuda_library(path: str) -> bool:
    """A library of the CUDA stack, by where it lives or what it is called."""
    lowered = path.lower()
    return any(part in lowered for part in _CUDA_PARTS)


def load_order(paths: list[str]) -> list[str]:
    """The libraries in an order that opens dependencies first: outside torch first (the
    CUDA stack, the C++ runtime), then c10, torch's CPU library, the rest of torch, and
    the Python bindings last. A Python extension module is left to the import."""

    def rank(path: str) -> tuple[int, str]:
        name = PurePath(path).name
        if "/torch/" not in path:
            return (0, name)
        for position, prefix in enumerate(("libc10.", "libtorch_cpu", "libc10_", "libtorch_cuda")):
            if name.startswith(prefix):
                return (1 + position, name)
        return (7 if "python" in name or "global_deps" in name else 6, name)

    return sorted((p for p in paths if ".cpython-" not in PurePath(p).name), key=rank)


def applies(finding: Finding) -> bool:
    return finding.facts.get("kind") == STARTUP and finding.item.endswith("import_torch")


def _call(job: ExplainJob, role: str, worker: Any, **kwargs: Any) -> dict[str, Any]:
    result = worker.call(EXPLAIN_STARTUP, kwargs, timeout_s=180)
    if not result.ok or "error" in result.value:
        raise RuntimeError(f"{role}: {result.error or result.value['error']}")
    return dict(result.value)


def _each_side(
    job: ExplainJob,
    workers: dict[str, Any],
    rng: random.Random,
    mode: str,
    libraries: dict[str, list[str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """One ``mode`` child per side, both at the same time, started in a random order.

    At once rather than back to back: the pair that is compared meets the machine (its
    load, its page cache) at the same moment, and each child, CPU-bound and timed on its
    own CPU clock, has a CPU of its own on a machine of two or more; a round takes half
    the wall time."""
    with ThreadPoolExecutor(len(ROLES)) as pool:
        running = {
            role: pool.submit(
                _call, job, role, workers[role], mode=mode, libraries=(libraries or {}).get(role)
            )
            for role in rng.sample(ROLES, len(ROLES))
        }
    return {role: running[role].result() for role in ROLES}


def _measure(job: ExplainJob) -> tuple[dict[str, dict[str, Any]], dict[str, list[Round]]]:
    """Each side's ``-X importtime`` profile (untimed, it is also the import that reads
    the libraries from disk), then rounds of plain and preload samples."""
    with both_sides(job) as workers:
        each_side = partial(_each_side, job, workers, random.Random(31))
        profiles = each_side("importtime")
        order = {role: load_order(list(profiles[role]["libraries"])) for role in ROLES}
        rounds: dict[str, list[Round]] = {role: [] for role in ROLES}
        longest_s = 0.0
        for _ in range(job.settings.rounds):
            # None started that the longest one so far says would end past the budget (the
            # last one's duration let a load spike overrun a 150 s budget by 7 s).
            if job.seconds_left() < longest_s:
                break
            started = time.monotonic()
            plain, split = each_side("plain"), each_side("preload", order)
            for role in ROLES:
                rounds[role].append(
                    {"plain": plain[role]["import_s"], "plain_cpu": plain[role]["import_cpu_s"]}
                    | split[role]
                )
            longest_s = max(longest_s, time.monotonic() - started)
    return profiles, rounds


def _library_seconds(round_: Round, names: set[str]) -> float:
    """CPU seconds loading the libraries named ``names`` took in a preload child."""
    return sum(s for path, s in round_["libraries_cpu_s"].items() if library_name(path) in names)


def split_total(round_: Round) -> float:
    """A preload child's whole import in CPU seconds: every library's loading and the rest."""
    return float(sum(round_["libraries_cpu_s"].values()) + round_["import_cpu_s"])


def _rest(round_: Round) -> float:
    return float(round_["import_cpu_s"])


def _per_round(rounds: dict[str, list[Round]], part: Callable[[Round], float]) -> list[float]:
    """How far ``part`` moved in each round: the candidate's minus the baseline's (the two
    ran at the same time, so the machine's drift between rounds cancels)."""
    pairs = zip(rounds["baseline"], rounds["candidate"], strict=False)
    return [part(candidate) - part(baseline) for baseline, candidate in pairs]


def _plain(round_: Round) -> float:
    return float(round_["plain_cpu"])


def _plain_wall(round_: Round) -> float:
    return float(round_["plain"])


def _libraries_line(profile: dict[str, Any]) -> str:
    libraries = profile["libraries"]
    return f"{len(libraries)} libraries, {sum(libraries.values()) / 1e6:.0f} MB"


def _module_lines(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """The modules whose own import time moved most: where to look inside the rest of the
    import (one ``-X importtime`` run per side, so no interval and no share; a module's
    time includes the libraries its import loads, so these overlap the library parts)."""
    base, cand = profiles["baseline"]["modules_s"], profiles["candidate"]["modules_s"]
    moved = {name: cand.get(name, 0.0) - base.get(name, 0.0) for name in {*base, *cand}}
    top = sorted(moved, key=lambda name: -abs(moved[name]))[:_TOP_MODULES]
    return [
        f"module {name}: {base.get(name, 0.0) * 1e3:.0f} ms -> {cand.get(name, 0.0) * 1e3:.0f} ms "
        "(one -X importtime run per side, libraries its import loads included)"
        for name in top
    ]


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    profiles, rounds = _measure(job)
    if len(rounds["baseline"]) < MIN_ROUNDS:
        return Contribution(
            not_checked=(
                f"startup: not explained: the budget held {len(rounds['baseline'])} round(s), "
                f"{MIN_ROUNDS} are the fewest shares are drawn from",
            )
        )
    reproduce = (
        f"{job.ctx.environments['candidate'].python} -X importtime -c 'import torch' "
        "2>&1 | sort -t'|' -k1 -n | tail"
    )
    return decompose(profiles, rounds, reproduce, slower=finding.ratio is None or finding.ratio > 1)


def _reproduced(whole: shares.Interval | None, slower: bool) -> bool:
    """Whether the split children's change lies wholly on the finding's side of 0."""
    return whole is not None and (whole[1] > 0 if slower else whole[2] < 0)


def decompose(
    profiles: dict[str, dict[str, Any]],
    rounds: dict[str, list[Round]],
    reproduce: str,
    slower: bool = True,
) -> Contribution:
    """The measured rounds as one decomposition of the split children's change in CPU
    time, whose parts add up to it, or, where they do not reproduce the finding
    (``slower``: the candidate's import took longer), what they measured and no share."""
    names = {
        role: {library_name(p) for p in profiles[role]["libraries"] if ".cpython-" not in p}
        for role in ROLES
    }
    own = names["candidate"] - names["baseline"]
    gone = names["baseline"] - names["candidate"]
    both = names["candidate"] & names["baseline"]
    plain = _per_round(rounds, _plain)
    split = _per_round(rounds, split_total)
    whole = shares.mean(split)
    plain_change = shares.mean(plain)
    wall = shares.mean(_per_round(rounds, _plain_wall))
    # What preloading changes of the import: the plain children against the split ones.
    preloading = shares.mean([p - s for p, s in zip(plain, split, strict=True)])
    build = _per_round(rounds, lambda r: _library_seconds(r, own))
    same_build = shares.ratio(
        [s - b for s, b in zip(split, build, strict=True)],
        [split_total(r) for r in rounds["baseline"]][: len(split)],
    )
    extra: dict[str, Any] = {
        "startup": {
            "delta_s": shares.listed(whole),  # CPU seconds, the split children
            "plain_delta_s": shares.listed(plain_change),  # CPU seconds, the plain children
            "wall_delta_s": shares.listed(wall),
            "rounds": {role: len(rounds[role]) for role in ROLES},
            "libraries": {role: _libraries_line(profiles[role]) for role in ROLES},
            "build_libraries": sorted(own),
            "cuda_libraries": sorted(n for n in own if is_cuda_library(n)),
            # The import's change were the build's own libraries not loaded: what a
            # same-build upgrade would show, as a fraction of the baseline's import.
            "without_build_libraries": shares.listed(same_build),
        }
    }
    parts: dict[str, tuple[str, Callable[[Round], float]]] = {
        "build": ("the candidate build's own libraries", lambda r: _library_seconds(r, own)),
        "python": ("the rest of import torch (Python modules, initialisation)", _rest),
        "shared-libraries": ("the libraries both builds load", lambda r: _library_seconds(r, both)),
    }
    if gone:
        parts["gone"] = (
            "the libraries only the baseline loads",
            lambda r: _library_seconds(r, gone),
        )
    moved = {kind: _per_round(rounds, part) for kind, (_, part) in parts.items()}
    order, lead = leading(moved, split, {kind: name for kind, (name, _) in parts.items()})
    extra["startup"] |= {"order": order, "leading": lead}
    measured = (
        f"the split import CPU {_ms(whole)}, the plain import CPU {_ms(plain_change)} "
        f"and wall {_ms(wall)} over {len(split)} rounds"
    )
    each = ", ".join(f"{parts[kind][0]} {_ms(shares.mean(moved[kind]))}" for kind in order)
    if not _reproduced(whole, slower):
        return _no_share(
            f"these rounds did not reproduce the import's change: they measured {measured}, "
            f"of it {each}",
            extra,
        )
    if preloading is None or not _holds_0(preloading):
        return _no_share(
            f"preloading the libraries changed the import: the plain import minus the split "
            f"one {_ms(preloading)}, so the split is not the plain import's; they measured "
            f"{measured}, of it {each}",
            extra,
        )
    within = {
        "build": _library_lines(rounds, own, split),
        "gone": _library_lines(rounds, gone, split),
        "python": _module_lines(profiles),
    }
    causes = []
    for kind in order:
        name, part = parts[kind]
        interval = shares.ratio(moved[kind], split)
        if interval is None:
            continue
        causes.append(
            Cause(
                kind,
                name,
                *interval,
                evidence=_evidence(kind, profiles, rounds, own, part)
                + (_same_build_line(same_build) if kind == "build" else "")
                + (f"; {lead}" if kind == order[0] else ""),
                reproduce=reproduce,
                detail={"rank": order.index(kind)}
                | ({"within": within[kind]} if within.get(kind) else {}),
            )
        )
    # The parts are timed in the same children and add up to their whole import, so
    # nothing of the change they split is left unexplained.
    return Contribution(
        tuple(causes),
        (0.0, 0.0, 0.0),
        not_checked=(
            f"startup: the split of the import's wall time: it moves with the machine's "
            f"other work; the shares are of the CPU time of the children that split it, whose "
            f"parts add up to it ({measured}; the plain minus the split {_ms(preloading)}, "
            "not told apart)",
        ),
        extra=extra,
    )


def _no_share(reason: str, extra: dict[str, Any]) -> Contribution:
    return Contribution(not_checked=(f"startup: {reason}; no share is shown",), extra=extra)


def _above_0(share: shares.Interval | None) -> bool:
    """Whether a share's interval lies above 0 (None: no share, nothing to hold against)."""
    return share is None or share[1] > 0


def _holds_0(interval: shares.Interval | None) -> bool:
    """Whether an interval of a difference holds 0 (None: too few rounds to tell)."""
    return interval is None or interval[1] <= 0 <= interval[2]


def leading(
    moved: dict[str, list[float]], whole: list[float], names: dict[str, str]
) -> tuple[list[str], str]:
    """The parts in the order shown, and in words which lead. The part with the largest
    share leads alone only where its per-round change is told apart from each other
    part's (the :data:`LEAD` t interval of their difference excludes 0); the parts it is
    not told apart from lead with it, in the order ``moved`` lists them (a fixed order, so
    a near tie gives the same leading parts in every run); the rest follow by share."""
    sign = 1.0 if sum(whole) >= 0 else -1.0
    by_share = sorted(moved, key=lambda kind: -sign * sum(moved[kind]))
    top = by_share[0]
    gaps = {
        kind: shares.mean([a - b for a, b in zip(moved[top], moved[kind], strict=True)], LEAD)
        for kind in by_share[1:]
    }
    # A part not told apart from the first leads with it only if it accounts for some of
    # the change (its share's interval above 0): one that may account for none leads nothing.
    tied = {
        kind
        for kind, gap in gaps.items()
        if _holds_0(gap) and _above_0(shares.ratio(moved[kind], whole))
    }
    first = [kind for kind in moved if kind == top or kind in tied]
    order = first + [kind for kind in by_share if kind not in first]
    if len(first) == 1:
        runner = by_share[1] if len(by_share) > 1 else None
        if runner is None:
            lead = "it leads"
        elif _holds_0(gaps[runner]):  # not told apart, yet not tied: its share may be none
            lead = (
                f"it leads: {names[runner]} is not told apart from it ({names[top]} minus it "
                f"{_ms(gaps[runner])}), but its own share's interval holds 0: it may account "
                "for none of the change"
            )
        else:
            lead = f"it leads, ahead of {names[runner]} by {_ms(gaps[runner])}"
    else:
        others = [kind for kind in first if kind != first[0]]
        lead = (
            f"it leads together with {' and '.join(names[k] for k in others)}: these rounds "
            "do not tell their changes apart ("
            + "; ".join(f"{names[top]} minus {names[k]} {_ms(gaps[k])}" for k in first if k != top)
            + ")"
        )
    return order, lead


def _ms(delta: shares.Interval | None) -> str:
    if delta is None:
        return "not measured"
    return f"{delta[0] * 1e3:+.0f} ms [{delta[1] * 1e3:+.0f}, {delta[2] * 1e3:+.0f}]"


def _same_build_line(same_build: shares.Interval | None) -> str:
    """What the import's change would be without the build's own libraries: what an
    upgrade within the same build would show."""
    if same_build is None:
        return ""
    value, low, high = same_build
    return (
        f"; without them the candidate's import would be {value:+.0%} [{low:+.0%}, "
        f"{high:+.0%}] against the baseline's (what a same-build upgrade would show)"
    )


def _evidence(
    kind: str,
    profiles: dict[str, dict[str, Any]],
    rounds: dict[str, list[Round]],
    own: set[str],
    part: Callable[[Round], float],
) -> str:
    medians = {role: shares.median([part(r) for r in rounds[role]]) for role in ROLES}
    line = f"{medians['baseline'] * 1e3:.0f} -> {medians['candidate'] * 1e3:.0f} ms of CPU"
    if kind != "build":
        return line
    sizes = {library_name(p): b for p, b in profiles["candidate"]["libraries"].items()}
    cuda = [n for n in own if is_cuda_library(n)]
    return (
        f"{line}; {len(own)} libraries ({sum(sizes[n] for n in own) / 1e6:.0f} MB) only the "
        f"candidate loads, {len(cuda)} of them CUDA ({', '.join(sorted(cuda)[:6])}"
        f"{', ...' if len(cuda) > 6 else ''}); candidate {_libraries_line(profiles['candidate'])}"
        f", baseline {_libraries_line(profiles['baseline'])}"
    )


def _one_library(name: str) -> Callable[[Round], float]:
    return lambda round_: _library_seconds(round_, {name})


def _library_lines(
    rounds: dict[str, list[Round]], names: set[str], plain: list[float]
) -> list[str]:
    """The single libraries (of one build only) whose loading moved most, with their share
    of the import's change: detail inside their part, never a share beside it."""
    moved = {name: _per_round(rounds, _one_library(name)) for name in names}
    top = sorted(moved, key=lambda name: -abs(sum(moved[name])))[:_TOP_LIBRARIES]
    lines = []
    for name in top:
        share = shares.ratio(moved[name], plain)
        lines.append(
            f"library {name}: loading it {sum(moved[name]) / len(plain) * 1e3:+.0f} ms, "
            f"{share_text(*share) if share else 'no share'} of the change"
        )
    return lines


EXPLAINER: Explainer = FunctionExplainer("startup", applies, explain)
