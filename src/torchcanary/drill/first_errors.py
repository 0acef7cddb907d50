"""A failed attempt's first error, from every source it left: the ranks' event files,
torchrun's log (each traceback's last line, and its root-cause block) and the Flight
Recorder; and whether the cause lies in the harness or in torch.

Orchestrator side, standard library only. The ranks' events hold what a rank caught; a
relaunched worker that dies while it joins its group (``init_process_group``, DDP's first
collective) often writes none, and only torchrun's log says why. So a failure's reason
names the first error of each source that has one, and the error the drill leads with is
the first of them in that order.

The cause: an error raised inside torch (gloo, c10d, torchrun's rendezvous) is torch's;
one the harness raises, or a job that would not start, is the harness's. Two causes seen
with the built-in job under torchrun are named (:data:`KNOWN_CAUSES`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SHOWN_CHARS = 240
SHOWN_LOG_ERRORS = 3
# The last line of a traceback: ``[rank2]: RuntimeError: ...`` or ``torch.x.YError: ...``.
_RAISED = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?P<kind>[A-Za-z_][\w.]*(?:Error|Exception)):\s*(?P<text>.+)$"
)
# A C++ exception that escaped a thread (a gloo worker at interpreter exit): the rank aborts.
_TERMINATED = re.compile(r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?P<text>terminate called .+)$")
_SOURCE_PATH = re.compile(r"\[/[^\]]+\]\s*")  # [/__w/pytorch/.../pair.cc:152]
# torchrun's own wrapper around its workers' failures: its root-cause block says more.
_WRAPPERS = ("ChildFailedError",)
# Words that place an error inside torch's distributed stack.
_TORCH_WORDS = (
    *("gloo", "c10d", "nccl", "rendezvous", "tcpstore", "processgroup", "torch.distributed"),
)

# (words in the errors, recovery or None for any) -> the cause, in one sentence.
KNOWN_CAUSES: tuple[tuple[str, str | None, str], ...] = (
    (
        "connectFullMesh failed",
        "restart",
        "torch's: torchrun shares its rendezvous TCPStore with the workers across restarts "
        "and the default group's keys are not kept apart per restart, so a relaunched worker "
        "can read the previous round's addresses and dial dead peers (pytorch/pytorch#135712; "
        "restart-unshared, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, avoids it)",
    ),
    (
        "RendezvousConnectionError",
        None,
        "torch's, by design: torchrun's agents need their c10d rendezvous store to restart "
        "the job, and with its host killed they stop; no version restarts without it",
    ),
)


def _short(text: str) -> str:
    return _SOURCE_PATH.sub("", text.strip())[:SHOWN_CHARS]


def log_errors(text: str) -> list[str]:
    """The distinct errors raised in a launch log, in order: each traceback's last line,
    and each C++ ``terminate called ...`` line, with its rank when torchrun tagged it."""
    found: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        raised = _RAISED.match(line.strip()) or _TERMINATED.match(line.strip())
        if raised is None:
            continue
        kind = raised.groupdict().get("kind")
        if kind is not None and kind.rsplit(".", 1)[-1] in _WRAPPERS:
            continue
        said = f"{kind}: {_short(raised['text'])}" if kind else _short(raised["text"])
        if raised["rank"] is not None:
            said = f"rank {raised['rank']}: {said}"
        key = re.sub(r"\d+", "N", said)  # ports, pids and times differ from rank to rank
        if key not in seen:
            seen.add(key)
            found.append(said)
    return found


def root_cause(text: str) -> str | None:
    """torchrun's root-cause block (the last one in the log) in one line, or None."""
    _, marker, block = text.rpartition("Root Cause (first observed failure):")
    if not marker:
        return None
    fields = dict(
        (match[1], match[2].strip())
        for match in re.finditer(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$", block, re.M)
    )
    if "rank" not in fields:
        return None
    said = f"rank {fields['rank']} exited with {fields.get('exitcode', '?')}"
    traceback = fields.get("traceback", "")
    if traceback and not traceback.startswith("To enable traceback"):
        said += f": {traceback}"
    return re.sub(r"\s+", " ", said)[:SHOWN_CHARS]


def collect(
    events: list[dict[str, Any]],
    fault_t: float | None,
    logs: Path,
    flight_finding: str | None = None,
) -> dict[str, Any]:
    """Every source's first error: ``events`` (the first a rank caught after the fault, or
    before it when none was injected), ``launch_log`` (up to three distinct ones from
    torchrun's or the ranks' logs), ``root_cause`` and ``flight_recorder``; only those
    that have one."""
    errors = [e for e in events if e["ev"] == "error"]
    after = [e for e in errors if fault_t is None or e["t"] >= fault_t]
    found: dict[str, Any] = {}
    if after:
        first = after[0]
        found["events"] = f"rank {first.get('rank')}: {_short(str(first.get('error')))}"
    texts = [p.read_text(errors="replace") for p in sorted(logs.glob("*.log"))]
    from_logs = [error for text in texts for error in log_errors(text)]
    if from_logs:
        found["launch_log"] = from_logs[:SHOWN_LOG_ERRORS]
    causes = [cause for cause in map(root_cause, texts) if cause]
    if causes:
        found["root_cause"] = causes[0]
    if flight_finding:
        found["flight_recorder"] = flight_finding
    return found


def first(found: dict[str, Any]) -> str | None:
    """The error a reason leads with: the ranks' own, else the launch log's, else the
    root cause, else the Flight Recorder's finding."""
    for source in ("events", "launch_log", "root_cause", "flight_recorder"):
        value = found.get(source)
        if value:
            return str(value[0] if isinstance(value, list) else value)
    return None


def cause(found: dict[str, Any], recovery: str, launch_failed: bool = False) -> str:
    """Where the failure's cause lies, in one sentence: a known cause, torch (an error
    raised inside its distributed stack), the harness, or not known."""
    if launch_failed:
        return "the harness's: a drill process could not start"
    text = " ".join(
        " ".join(value) if isinstance(value, list) else str(value) for value in found.values()
    )
    for words, only_for, sentence in KNOWN_CAUSES:
        if words in text and only_for in (None, recovery):
            return sentence
    lowered = text.lower()
    if any(word in lowered for word in _TORCH_WORDS):
        return "torch's: the error was raised inside torch.distributed"
    if "torchcanary" in lowered:
        return "the harness's: the error was raised in torchcanary's code"
    return "not known: no source named an error inside torch or the harness"


def describe(found: dict[str, Any]) -> str:
    """Every source's first error, for a failed attempt's reason."""
    parts = []
    if found.get("events"):
        parts.append(f"the ranks: {found['events']}")
    if found.get("launch_log"):
        parts.append(f"torchrun's log: {' | '.join(found['launch_log'])}")
    if found.get("root_cause"):
        parts.append(f"root cause: {found['root_cause']}")
    if found.get("flight_recorder"):
        parts.append(f"Flight Recorder: {found['flight_recorder']}")
    return "; ".join(parts) if parts else "none recorded in any source"
