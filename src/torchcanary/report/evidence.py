"""A run's evidence digest: one sha256 a team can cite ("run R, digest D") and anyone can
recompute from the run's ``results.json`` (``torchcanary verify``).

The evidence is ``results.json`` itself, cut into named parts so that a mismatch says
which part differs: the policy, the run (its plan without the policy), each environment
(its manifest), each section's results, and every other top-level entry (the decision,
a section's own entries such as the packs, a fleet's matrix) under its own name. Each
part is hashed in a canonical JSON form; the digest hashes the sorted ``name sha256``
lines (docs/json-schema.md, "Evidence").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVIDENCE_KEY = "evidence"  # the entry of results.json that holds it
EVIDENCE_ARTIFACT = "evidence"  # the store artifact the run keeps it under
DIGEST_PREFIX = "sha256:"


def canonical_bytes(value: Any) -> bytes:
    """One byte form per JSON value: keys sorted, no whitespace, UTF-8, integers and
    floats as Python's shortest round-tripping repr (what ``json`` writes)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Evidence:
    """Each evidence part's sha256, and the digest over them all."""

    digest: str
    files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "files": dict(sorted(self.files.items()))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        return cls(str(data["digest"]), {str(k): str(v) for k, v in data["files"].items()})


def recorded_evidence(results_path: Path) -> tuple[dict[str, Any], Evidence | None]:
    """``results.json`` parsed, and the evidence it records (None for a file written
    before runs carried one)."""
    results: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8"))
    recorded = results.get(EVIDENCE_KEY)
    return results, Evidence.from_json(recorded) if isinstance(recorded, dict) else None


def evidence_parts(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` (the parsed ``results.json``, its ``evidence`` ignored) as named parts."""
    parts: dict[str, Any] = {}
    for key, value in results.items():
        if key == EVIDENCE_KEY:
            continue
        if key == "run" and isinstance(value, dict):
            plan = dict(value.get("plan") or {})
            parts["policy"] = plan.pop("policy", {})
            parts["run"] = value | {"plan": plan}
        elif key in ("environments", "sections") and isinstance(value, dict):
            prefix = "environment" if key == "environments" else "results"
            parts |= {f"{prefix}.{name}": item for name, item in value.items()}
        else:
            parts[key] = value
    return parts


def evidence_of(results: dict[str, Any]) -> Evidence:
    """The evidence of ``results`` (parsed JSON, so it matches what a reader of the file
    recomputes): each part's sha256 and the digest of the sorted ``name sha256`` lines."""
    files = {name: _sha256(canonical_bytes(part)) for name, part in evidence_parts(results).items()}
    listing = "".join(f"{name} {files[name]}\n" for name in sorted(files))
    return Evidence(DIGEST_PREFIX + _sha256(listing.encode("utf-8")), files)


def differences(recorded: Evidence, recomputed: Evidence) -> list[str]:
    """Each part that differs between two evidence records, in words; empty when they match."""
    names = sorted(set(recorded.files) | set(recomputed.files))
    found = []
    for name in names:
        was, now = recorded.files.get(name), recomputed.files.get(name)
        if was is None:
            found.append(f"{name}: not in the recorded evidence")
        elif now is None:
            found.append(f"{name}: recorded but missing now")
        elif was != now:
            found.append(f"{name}: differs (recorded {was[:12]}, now {now[:12]})")
    if not found and recorded.digest != recomputed.digest:
        found.append(f"digest: recorded {recorded.digest}, recomputed {recomputed.digest}")
    return found


def citation(run_id: str, evidence: Evidence) -> str:
    """The line a team cites, and the summary and the terminal end with."""
    return f"run {run_id}, digest {evidence.digest}"
