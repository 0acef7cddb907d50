"""Does the Flight Recorder point at the culprit? Reading the dumps every rank left.

Orchestrator side, standard library only (the JSON dumps are read here; torch's own
analyser, which reads torch's pickle dumps, runs as a subprocess in the target environment).

Our reading, per process group, for the launch in which the fault struck:
- the stalled collective is the highest sequence number any rank recorded;
- a rank is a suspect if it left no dump, never recorded that collective, or recorded it
  much later than the first rank did (it arrived late: it was stopped or cut off);
- the recorder "names the culprit" when the suspects are exactly the rank the drill hit.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

LATE_ARRIVAL_S = 1.0
ANALYSER_TIMEOUT_S = 90.0


def _default_group(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries of the group with the most collectives (the data-parallel group)."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        group = entry.get("process_group") or ["?"]
        by_group.setdefault(str(group[0]), []).append(entry)
    return max(by_group.values(), key=len) if by_group else []


def read_dumps(json_dir: Path) -> dict[int, list[dict[str, Any]]]:
    dumps: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(json_dir.glob("rank_*.json")):
        match = re.fullmatch(r"rank_(\d+)\.json", path.name)
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if match:
            dumps[int(match.group(1))] = _default_group(list(data.get("entries") or []))
    return dumps


def analyse(json_dir: Path, world: int, target: int | None) -> dict[str, Any]:
    """What the dumps in ``json_dir`` say about which rank stalled which collective."""
    dumps = read_dumps(json_dir)
    missing = [rank for rank in range(world) if rank not in dumps]
    if not dumps:
        return {
            "dumped_ranks": [],
            "missing_ranks": missing,
            "suspects": [],
            "named_culprit": False,
            "collective": None,
            "finding": "no rank left a Flight Recorder dump",
        }
    last_seq = {
        rank: max((int(e.get("collective_seq_id") or 0) for e in entries), default=0)
        for rank, entries in dumps.items()
    }
    stalled = max(last_seq.values())
    at_stall = {
        rank: next((e for e in entries if int(e.get("collective_seq_id") or 0) == stalled), None)
        for rank, entries in dumps.items()
    }
    example = next(e for e in at_stall.values() if e is not None)
    behind = sorted(rank for rank, seq in last_seq.items() if seq < stalled)
    created = {
        rank: int(e["time_created_ns"])
        for rank, e in at_stall.items()
        if e is not None and e.get("time_created_ns")
    }
    first = min(created.values()) if created else 0
    late = sorted(rank for rank, ns in created.items() if (ns - first) / 1e9 > LATE_ARRIVAL_S)
    suspects = sorted(set(missing) | set(behind) | set(late))
    collective = str(example.get("profiling_name") or "?")
    parts = [
        f"collective #{stalled} ({collective}, sizes {example.get('input_sizes')}) "
        "was the last one recorded"
    ]
    if missing:
        parts.append(f"no dump from rank {', '.join(map(str, missing))}")
    if behind:
        parts.append(f"rank {', '.join(map(str, behind))} never reached it")
    if late:
        lags = ", ".join(f"rank {r} +{(created[r] - first) / 1e9:.1f} s" for r in late)
        parts.append(f"late arrival: {lags}")
    if not suspects:
        parts.append("every rank entered it: the dumps name no culprit")
    return {
        # Gloo's recorder can mark a collective that failed as retired: say what it said.
        "stalled_entry_state": {"state": example.get("state"), "retired": example.get("retired")},
        "dumped_ranks": sorted(dumps),
        "missing_ranks": missing,
        "last_seq": {str(rank): seq for rank, seq in sorted(last_seq.items())},
        "stalled_seq": stalled,
        "collective": collective,
        "suspects": suspects,
        "named_culprit": None if target is None else suspects == [target],
        "finding": "; ".join(parts),
    }


def run_torch_analyser(python: str, pickle_dir: Path, world: int) -> dict[str, Any]:
    """Run torch's own ``fr_trace`` analyser on the pickle dumps; its verdict, in its words."""
    if not pickle_dir.is_dir() or not any(pickle_dir.iterdir()):
        return {"ran": False, "reason": "no dumps to analyse"}
    command = [
        python,
        "-m",
        "torch.distributed.flight_recorder.fr_trace",
        str(pickle_dir),
        "-p",
        "rank_",
    ]
    if len(list(pickle_dir.iterdir())) < world:
        command.append("--allow-incomplete-ranks")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ANALYSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"ran": False, "reason": f"fr_trace did not finish in {ANALYSER_TIMEOUT_S:g} s"}
    output = (done.stdout + done.stderr).strip()
    lines = list(dict.fromkeys(line for line in output.splitlines() if line.strip()))
    # The analyser names ranks it lacks or blames as "ranks ({1, 3})" or "rank 1".
    named = sorted(
        {
            int(n)
            for group in re.findall(r"ranks? \(?\{?([\d, ]+)\}?\)?", output)
            for n in re.findall(r"\d+", group)
        }
    )
    return {
        "ran": True,
        "exit_code": done.returncode,
        "named_ranks": named,
        "output_tail": "\n".join(lines[-12:]),
    }
