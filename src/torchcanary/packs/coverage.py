"""How much of each pack's notes a run checked: one row per claim, one line per pack.

Reads the packs stored with a run and the candidate's verdicts. A claim's status comes
from all the probes that check it: refuted if any refutes, verified if all confirm, not
checkable here if some could not run on this machine (with what they need), unprobed if
no probe covers it. Every claim of the notes gets a row, so none is silently missing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from torchcanary.probe_result import ProbeResult, Verdict


class CoverageStatus(str, Enum):
    VERIFIED = "verified"
    REFUTED = "refuted"
    NOT_CHECKABLE = "not checkable here"
    FAILED = "probe failed"
    NOT_RUN = "not run"
    UNPROBED = "unprobed"


_FAILED = {Verdict.ERROR, Verdict.CRASHED, Verdict.TIMEOUT}
_NEGATIVE = {Verdict.REFUTED, Verdict.ABSENT}


@dataclass(frozen=True)
class ClaimCoverage:
    """One claim of a pack, what the candidate showed, and whether the baseline was as expected."""

    pack: str
    claim_id: str
    topic: str
    quote: str
    probes: tuple[str, ...]
    status: CoverageStatus
    detail: str
    baseline_as_expected: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "pack": self.pack,
            "claim_id": self.claim_id,
            "topic": self.topic,
            "quote": self.quote,
            "probes": list(self.probes),
            "status": self.status.value,
            "detail": self.detail,
            "baseline_as_expected": self.baseline_as_expected,
        }


def _status(
    probes: tuple[str, ...],
    results: dict[str, ProbeResult],
    needs: str,
) -> tuple[CoverageStatus, str]:
    if not probes:
        return CoverageStatus.UNPROBED, "no probe covers this claim" + (
            f"; checking it needs {needs}" if needs else ""
        )
    present = {pid: results[pid].outcome for pid in probes if pid in results}
    if not present:
        return CoverageStatus.NOT_RUN, "its probes were not selected or not finished"
    verdicts = {pid: outcome.verdict for pid, outcome in present.items()}
    negative = [pid for pid, v in verdicts.items() if v in _NEGATIVE]
    if negative:
        return CoverageStatus.REFUTED, "; ".join(present[p].summary[:100] for p in negative)
    failed = [pid for pid, v in verdicts.items() if v in _FAILED]
    if failed:
        return CoverageStatus.FAILED, ", ".join(f"{p} {verdicts[p].value}" for p in failed)
    unchecked = [pid for pid, v in verdicts.items() if v is Verdict.NOT_CHECKABLE]
    if unchecked:
        confirmed = len(verdicts) - len(unchecked)
        partly = f"{confirmed} of {len(probes)} facets verified; " if confirmed else ""
        return CoverageStatus.NOT_CHECKABLE, partly + " / ".join(
            # The probe's own words on what this machine lacks, e.g. "needs an NVIDIA GPU".
            sorted({present[p].summary[:140] for p in unchecked})
        )
    if len(present) < len(probes):
        return CoverageStatus.NOT_RUN, f"{len(present)} of {len(probes)} probes ran"
    return CoverageStatus.VERIFIED, f"{len(probes)} probe(s) confirmed"


def _baseline_as_expected(expected: str, outcomes: list[Verdict]) -> bool | None:
    decided = [v for v in outcomes if v not in _FAILED and v is not Verdict.NOT_CHECKABLE]
    if expected == "any" or not decided:
        return None
    if expected == "absent":
        return all(v in _NEGATIVE for v in decided)
    return all(v is Verdict.CONFIRMED for v in decided)


def claim_coverage(
    packs: list[dict[str, Any]], probe_results: list[ProbeResult]
) -> list[ClaimCoverage]:
    """A row per claim of every pack stored with the run, in pack order."""
    by_role: dict[str, dict[str, ProbeResult]] = {"baseline": {}, "candidate": {}}
    for result in probe_results:
        by_role.setdefault(result.env_role, {})[result.probe_id] = result
    rows = []
    for pack in packs:
        for claim in pack.get("claims", ()):
            probes = tuple(claim["probes"]) if isinstance(claim["probes"], list) else ()
            status, detail = _status(probes, by_role["candidate"], str(claim.get("needs", "")))
            baseline = [
                by_role["baseline"][p].outcome.verdict for p in probes if p in by_role["baseline"]
            ]
            rows.append(
                ClaimCoverage(
                    pack=str(pack["name"]),
                    claim_id=str(claim["id"]),
                    topic=str(claim.get("topic", "")),
                    quote=str(claim["quote"]),
                    probes=probes,
                    status=status,
                    detail=detail,
                    baseline_as_expected=_baseline_as_expected(
                        str(claim.get("baseline_expected", "any")), baseline
                    ),
                )
            )
    return rows


def coverage_lines(packs: list[dict[str, Any]], rows: list[ClaimCoverage]) -> list[str]:
    """One line per pack: of its N claims, how many verified, refuted, not checkable, unprobed."""
    lines = []
    for pack in packs:
        mine = [row for row in rows if row.pack == pack["name"]]
        counts = Counter(row.status for row in mine)
        parts = [f"{counts[s]} {s.value}" for s in CoverageStatus if counts[s]]
        source = pack.get("notes", {}).get("file") if pack.get("notes") else None
        of = f"{len(mine)} claims in the {source} notes" if source else f"{len(mine)} checks"
        lines.append(f"{pack['name']}: of {of}: {', '.join(parts) or 'none'}")
    return lines
