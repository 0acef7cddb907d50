"""How a rank of the user's job died, in words: the signal, when, and what it printed.

Orchestrator side, standard library only. A rank killed by a signal with no fault injected
(SIGABRT from a C++ ``terminate called ...``, SIGSEGV) says little in its exit code alone:
torchrun's summary names the rank and the code, and the process usually printed why just
before it died. A rank that reported done and then died did all its work and broke on its
way out; such a death may not repeat from run to run, so the drill counts the tries.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any

# torchrun's agent, as each worker it watches fails: "failed (exitcode: -6) local_rank: 1
# (pid: 29111) of binary: ...". Its last words come before it, in the same log.
_AGENT_FAILURE = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
)
# What a process prints as it aborts: the C++ runtime's, glibc's and CPython's last words.
_LAST_WORDS = re.compile(
    r"terminate called|what\(\):|Fatal Python error|Assertion .* failed|double free|corrupted"
)


@dataclass(frozen=True)
class RankDeath:
    """One rank killed by a signal: which, whether it had finished, its last words."""

    rank: int
    signal: str
    after_done: bool
    message: str | None
    attempt: int = 0  # torchrun's launch it died in (0: the first)

    def describe(self) -> str:
        when = "after its last step, on its way out" if self.after_done else "while it ran"
        said = f" ({self.message})" if self.message else ""
        return f"rank {self.rank} was killed by {self.signal} {when}{said}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "signal": self.signal,
            "after_done": self.after_done,
            "message": self.message,
            "attempt": self.attempt,
        }


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def last_words(log_text: str) -> str | None:
    """The abort message a dying process printed (the first one), or None."""
    for line in log_text.splitlines():
        if _LAST_WORDS.search(line):
            return line.strip()[:300]
    return None


def finished(events: list[dict[str, Any]], rank: int, pid: int | None = None) -> bool:
    """Whether ``rank`` (its process ``pid``, when given) reported done."""
    return any(
        e["ev"] == "done" and int(e.get("rank", -1)) == rank and pid in (None, e.get("pid"))
        for e in events
    )


def torchrun_deaths(log_text: str, events: list[dict[str, Any]]) -> list[RankDeath]:
    """Every worker torchrun saw die of a signal, in order, each with the last words
    printed since the failure before it."""
    launches: dict[int, dict[str, Any]] = {int(e["pid"]): e for e in events if e["ev"] == "launch"}
    deaths: list[RankDeath] = []
    said: str | None = None
    for line in log_text.splitlines():
        failure = _AGENT_FAILURE.search(line)
        if failure is None:
            if said is None and _LAST_WORDS.search(line):
                said = line.strip()[:300]
            continue
        code, pid = int(failure["code"]), int(failure["pid"])
        if code < 0:
            launch: dict[str, Any] = launches.get(pid, {})
            rank = int(launch["rank"]) if "rank" in launch else int(str(failure["local"]))
            done = finished(events, rank, pid)
            attempt = int(launch.get("attempt", 0))
            deaths.append(RankDeath(rank, signal_name(code), done, said, attempt))
        said = None
    return deaths


def process_death(
    rank: int, code: int | None, log_text: str, events: list[dict[str, Any]]
) -> RankDeath | None:
    """A plain rank process (an in-place drill's) that died of a signal, or None."""
    if code is None or code >= 0:
        return None
    return RankDeath(rank, signal_name(code), finished(events, rank), last_words(log_text))


def teardown(
    deaths: list[RankDeath], events: list[dict[str, Any]], ranks: int, attempt: int
) -> list[RankDeath] | None:
    """The deaths that ended torchrun's launch ``attempt`` after all its work was done, or
    None when that launch did not run whole.

    Whole: each of ``ranks`` ranks launched and reported done (its script returned), and each
    death of that launch came after its rank's done. Such a launch trained every step; what
    broke is its teardown, reported beside the verdict, not instead of it."""
    launched = {
        int(e["rank"]): e.get("pid")
        for e in events
        if e["ev"] == "launch" and int(e.get("attempt", 0)) == attempt
    }
    ended = [death for death in deaths if death.attempt == attempt]
    if len(launched) != ranks or not ended or not all(d.after_done for d in ended):
        return None
    if not all(finished(events, rank, pid) for rank, pid in launched.items()):
        return None
    return ended
