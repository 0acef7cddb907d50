"""Why ``import torch`` got slower (or faster): the import split into the shared libraries
each build loads and the rest, measured in both environments; which modules and libraries
account for the delta; and how much of it the candidate build's own libraries are.

Measured in fresh interpreters of their own (``worker/explain/startup.py``), interleaved
across the two environments round by round, never mixed into the bench's samples:

- ``plain`` rounds time ``import torch`` as the bench does: the delta to explain;
- ``preload`` rounds open each shared library the import loads, one by one, then import
  torch: each library's loading and the rest (Python modules, initialisation), per side;
- one ``-X importtime`` run per side names the modules and the libraries (with sizes).

The shares are of the ``preload`` children's delta (each part and the whole timed in the
same children, so the shares hold together); what those do not reproduce of the ``plain``
delta is "unexplained". A library is matched across builds by its file name
without the wheel's hash. "The build's own libraries" are those only the candidate loads
(a CUDA build's ``nvidia/*``, ``libtorch_cuda``...): nothing is read from a version number.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from torchcanary.context import ROLES
from torchcanary.explain import shares
from torchcanary.explain.cause import Cause
from torchcanary.explain.job import Contribution, Explainer, ExplainJob, FunctionExplainer
from torchcanary.section_types import Finding
from torchcanary.worker.bench.specs import STARTUP
from torchcanary.worker.calls import EXPLAIN_STARTUP

_HASH = re.compile(r"-[0-9a-f]{8}(?=[.-])")
_TOP_MODULES = 6
_TOP_LIBRARIES = 8
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


def _measure(job: ExplainJob) -> tuple[dict[str, dict[str, Any]], dict[str, list[Round]]]:
    """Each side's ``-X importtime`` profile, then rounds of plain and preload samples."""
    workers = {role: job.ctx.new_worker(role) for role in ROLES}
    profiles = {role: _call(job, role, workers[role], mode="importtime") for role in ROLES}
    order = {role: load_order(list(profiles[role]["libraries"])) for role in ROLES}
    rounds: dict[str, list[Round]] = {role: [] for role in ROLES}
    for role in ROLES:  # untimed: the first import reads the libraries from disk
        _call(job, role, workers[role], mode="plain")
    rng = random.Random(31)
    last_round_s = 0.0
    for _ in range(job.settings.rounds):
        # At least 3 rounds; beyond them, none that would end past the budget.
        if job.seconds_left() < last_round_s and all(len(r) >= 3 for r in rounds.values()):
            break
        started = time.monotonic()
        for role in rng.sample(ROLES, len(ROLES)):
            plain = _call(job, role, workers[role], mode="plain")["import_s"]
            preload = _call(job, role, workers[role], mode="preload", libraries=order[role])
            rounds[role].append({"plain": plain, **preload})
        last_round_s = time.monotonic() - started
    return profiles, rounds


def _library_seconds(round_: Round, names: set[str]) -> float:
    return sum(s for path, s in round_["libraries_s"].items() if library_name(path) in names)


def split_total(round_: Round) -> float:
    """A preload child's whole import: every library's loading and the rest."""
    return float(sum(round_["libraries_s"].values()) + round_["import_s"])


def _moved(rounds: dict[str, list[Round]], part: Callable[[Round], float]) -> float:
    """How far ``part`` moved: the median over rounds of the candidate's minus the
    baseline's in the same round (the two ran back to back, so the machine's drift
    between rounds cancels)."""
    pairs = zip(rounds["baseline"], rounds["candidate"], strict=False)
    return shares.median([part(candidate) - part(baseline) for baseline, candidate in pairs])


def _interval(
    statistic: Callable[[dict[str, list[Round]]], float], rounds: dict[str, list[Round]]
) -> shares.Interval | None:
    """``statistic`` with its bootstrap interval, rounds resampled whole (both sides)."""
    pairs = list(zip(rounds["baseline"], rounds["candidate"], strict=False))
    return shares.paired(
        lambda drawn: statistic(
            {"baseline": [b for b, _ in drawn], "candidate": [c for _, c in drawn]}
        ),
        pairs,
    )


def _summed(rounds: dict[str, list[Round]], part: Callable[[Round], float]) -> float:
    """``part``'s candidate-minus-baseline difference summed over the rounds."""
    pairs = zip(rounds["baseline"], rounds["candidate"], strict=False)
    return sum(part(candidate) - part(baseline) for baseline, candidate in pairs)


def _share(part: Callable[[Round], float]) -> Callable[[dict[str, list[Round]]], float]:
    """The statistic: how far ``part`` moved as a share of how far the split import moved,
    a ratio of the rounds' summed differences: the parts are timed in the same children as
    the whole, so the shares of the parts add up to 1."""
    return lambda rounds: _summed(rounds, part) / _summed(rounds, split_total)


def _plain(round_: Round) -> float:
    return float(round_["plain"])


def _not_split(rounds: dict[str, list[Round]]) -> float:
    """The share of the plain import's change the split import does not reproduce (by the
    rounds' medians: a plain import is one sample, and one preempted round must not rule)."""
    return 1 - _moved(rounds, split_total) / _moved(rounds, _plain)


def _libraries_line(profile: dict[str, Any]) -> str:
    libraries = profile["libraries"]
    return f"{len(libraries)} libraries, {sum(libraries.values()) / 1e6:.0f} MB"


def _module_causes(profiles: dict[str, dict[str, Any]], delta_s: float) -> list[Cause]:
    """The modules whose own import time moved most (one ``-X importtime`` run per side:
    a pointer of where to look, with no interval; a module's time includes the libraries
    its import loads)."""
    base, cand = profiles["baseline"]["modules_s"], profiles["candidate"]["modules_s"]
    moved = {name: cand.get(name, 0.0) - base.get(name, 0.0) for name in {*base, *cand}}
    top = sorted(moved, key=lambda name: -abs(moved[name]))[:_TOP_MODULES]
    return [
        Cause(
            "module",
            name,
            share=moved[name] / delta_s if delta_s else None,
            evidence=f"its own import time {base.get(name, 0.0) * 1e3:.0f} ms -> "
            f"{cand.get(name, 0.0) * 1e3:.0f} ms (one -X importtime run per side; "
            "includes the libraries its import loads)",
        )
        for name in top
    ]


def explain(job: ExplainJob, finding: Finding) -> Contribution:
    profiles, rounds = _measure(job)
    names = {
        role: {library_name(p) for p in profiles[role]["libraries"] if ".cpython-" not in p}
        for role in ROLES
    }
    own = names["candidate"] - names["baseline"]
    gone = names["baseline"] - names["candidate"]
    both = names["candidate"] & names["baseline"]
    parts: dict[str, tuple[str, Callable[[Round], float]]] = {
        "build": ("the candidate build's own libraries", lambda r: _library_seconds(r, own)),
        "shared-libraries": ("the libraries both builds load", lambda r: _library_seconds(r, both)),
        "python": (
            "the rest of import torch (Python modules, initialisation)",
            lambda r: r["import_s"],
        ),
    }
    if gone:
        parts["gone"] = (
            "the libraries only the baseline loads",
            lambda r: _library_seconds(r, gone),
        )
    split_s = _moved(rounds, split_total)
    same_build = _interval(_without(parts["build"][1]), rounds)
    reproduce = (
        f"{job.ctx.environments['candidate'].python} -X importtime -c 'import torch' "
        "2>&1 | sort -t'|' -k1 -n | tail"
    )
    causes = []
    for kind, (name, part) in parts.items():
        interval = _interval(_share(part), rounds)
        if interval is None:
            continue
        causes.append(
            Cause(
                kind,
                name,
                *interval,
                evidence=_evidence(kind, profiles, rounds, own, part)
                + (_same_build_line(same_build) if kind == "build" else ""),
                reproduce=reproduce,
            )
        )
    causes += _library_causes(rounds, own | gone)
    causes += _module_causes(profiles, split_s)
    # The parts add up to the split import; what the split does not reproduce of the
    # plain import's change (preloading's own cost, noise) is the unexplained part.
    unexplained = _interval(_not_split, rounds)
    delta = _interval(lambda r: _moved(r, _plain), rounds)
    not_checked = []
    if delta is None or delta[1] <= 0 <= delta[2]:
        unexplained = None  # a share of a change these rounds did not show is no number
        not_checked.append(
            f"startup: these rounds did not reproduce the import's change "
            f"({_ms(delta)}): the unexplained part is not measured; the shares are of the "
            "split import's change; rerun with --explain full"
        )
    extra = {
        "startup": {
            "delta_s": list(delta) if delta else None,
            "split_delta_s": split_s,
            "rounds": {role: len(rounds[role]) for role in ROLES},
            "libraries": {role: _libraries_line(profiles[role]) for role in ROLES},
            "build_libraries": sorted(own),
            "cuda_libraries": sorted(n for n in own if is_cuda_library(n)),
            # The import's change were the build's own libraries not loaded: what a
            # same-build upgrade would show, as a fraction of the baseline's import.
            "without_build_libraries": list(same_build) if same_build else None,
        }
    }
    return Contribution(tuple(causes), unexplained, tuple(not_checked), extra=extra)


def _without(part: Callable[[Round], float]) -> Callable[[dict[str, list[Round]]], float]:
    """The statistic: the import's change were ``part`` not moved, as a fraction of the
    baseline's import (what a same-build upgrade would show when ``part`` is the build's)."""

    def statistic(rounds: dict[str, list[Round]]) -> float:
        base = sum(split_total(r) for r in rounds["baseline"])
        return (_summed(rounds, split_total) - _summed(rounds, part)) / base

    return statistic


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
    line = f"{medians['baseline'] * 1e3:.0f} ms -> {medians['candidate'] * 1e3:.0f} ms"
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


def _library_causes(rounds: dict[str, list[Round]], names: set[str]) -> list[Cause]:
    """The single libraries (of one build only) whose loading takes most of the delta."""
    seconds = {
        name: shares.median([_library_seconds(r, {name}) for r in rounds["candidate"]])
        - shares.median([_library_seconds(r, {name}) for r in rounds["baseline"]])
        for name in names
    }
    top = sorted(seconds, key=lambda name: -abs(seconds[name]))[:_TOP_LIBRARIES]
    causes = []
    for name in top:
        interval = _interval(_share(_one_library(name)), rounds)
        if interval is not None:
            causes.append(
                Cause(
                    "library",
                    name,
                    *interval,
                    evidence=f"loading it: {seconds[name] * 1e3:+.0f} ms",
                )
            )
    return causes


EXPLAINER: Explainer = FunctionExplainer("startup", applies, explain)
