"""A reproducer's folder: ``repro.py``, each version's pins, what each printed in the run
(``expected.txt``), a draft upstream issue (``ISSUE.md``) and, once run again,
``verification.json``."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.repro.reproducer import ROLES, Reproducer, Verification
from torchcanary.section_types import RunView

SCRIPT = "repro.py"
_WHEEL_INDEX = "https://download.pytorch.org/whl/"


@dataclass(frozen=True)
class RunFacts:
    """What an upstream report says of the run a finding came from."""

    run_id: str
    digest: str
    facts: dict[str, dict[str, Any]]  # role -> the environment's manifest
    confounds: dict[str, tuple[Any, Any]]

    @classmethod
    def of(cls, view: RunView, digest: str) -> RunFacts:
        facts = {role: dict(env.manifest.facts) for role, env in view.environments.items()}
        return cls(view.run.run_id, digest, facts, view.confounds())


def folder_name(finding: str) -> str:
    """A folder name for a finding key: readable, and unique by a short hash of the key."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", finding).strip("-.")[:60]
    return f"{readable}-{hashlib.sha256(finding.encode()).hexdigest()[:8]}"


def requirements(facts: dict[str, Any]) -> str:
    """Exact pins from an environment's manifest: torch (with the index of its build
    variant) and numpy where it was installed."""
    version = str(facts.get("torch_version", ""))
    lines = [f"# python {facts.get('python_version', '?')}"]
    if "+" in version:
        lines.append(f"--extra-index-url {_WHEEL_INDEX}{version.split('+', 1)[1]}")
    lines.append(f"torch=={version}")
    if facts.get("numpy_version"):
        lines.append(f"numpy=={facts['numpy_version']}")
    return "\n".join(lines) + "\n"


def write_folder(folder: Path, reproducer: Reproducer, run: RunFacts) -> Path:
    """Write everything but the verification; returns the script's path."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / SCRIPT
    script.write_text(reproducer.script)
    for name, text in reproducer.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    for role in ROLES:
        (folder / f"requirements-{role}.txt").write_text(requirements(run.facts.get(role, {})))
    expected = [f"{role}: {reproducer.observed.get(role, '?')}" for role in ROLES]
    (folder / "expected.txt").write_text("\n".join(expected) + "\n")
    return script


def write_verification(
    folder: Path, reproducer: Reproducer, run: RunFacts, verification: Verification, notes: str
) -> None:
    """``verification.json`` and ``ISSUE.md``, which quotes what the script printed;
    ``notes``: how its inputs were reduced (empty: they were not)."""
    kept = verification.to_json() | ({"reduced": notes} if notes else {})
    (folder / "verification.json").write_text(json.dumps(kept, indent=2) + "\n")
    (folder / "ISSUE.md").write_text(issue_text(reproducer, run, verification, notes))


def _version_line(role: str, facts: dict[str, Any]) -> str:
    variant = facts.get("torch_build_variant", "?")
    cuda = facts.get("cuda_version") or "none"
    return f"- {role}: torch {facts.get('torch_version', '?')} (build {variant}, CUDA {cuda})"


def issue_text(
    reproducer: Reproducer, run: RunFacts, verification: Verification, notes: str = ""
) -> str:
    """A draft upstream issue: what changed, in which versions, on which machine, with the
    script and what each version printed."""
    candidate = run.facts.get("candidate", {})
    hardware = f"{candidate.get('cpu_model', '?')} ({candidate.get('cpu_count', '?')} CPUs)"
    gpus = ", ".join(str(g.get("name")) for g in candidate.get("gpus") or []) or "none"
    confounds = "; ".join(f"{k}: {a} vs {b}" for k, (a, b) in run.confounds.items()) or "none"
    outputs = [  # each version's (a timing script prints both versions' at once)
        f"### {'it' if role == 'both' else role} printed\n\n```\n{printed.rstrip()}\n```"
        for role, printed in verification.outputs.items()
    ]
    expected = reproducer.observed.get("baseline", "?")
    observed = reproducer.observed.get("candidate", "?")
    return "\n".join(
        [
            f"# {reproducer.title}",
            "",
            "## Versions",
            *(_version_line(role, run.facts.get(role, {})) for role in ROLES),
            f"- Python {candidate.get('python_version', '?')}, {candidate.get('os', '?')}",
            f"- hardware: {hardware}; GPUs: {gpus}",
            f"- other build differences (confounds): {confounds}",
            "",
            "## Observed vs expected",
            f"- expected (as in the baseline): {expected}",
            f"- observed (the candidate): {observed}",
            "",
            "## Reproducer",
            "",
            f"```python\n{reproducer.script.rstrip()}\n```",
            "",
            *(
                f"`{name}`:\n\n```python\n{text.rstrip()}\n```\n"
                for name, text in reproducer.files.items()
            ),
            f"Run again in both versions: **{verification.verdict}** ({verification.reason}).",
            *([f"Inputs {notes}."] if notes else []),
            "",
            *outputs,
            "",
            *_traceback(reproducer),
            f"Found by torchcanary: run {run.run_id}, digest {run.digest}.",
            "",
        ]
    )


def _traceback(reproducer: Reproducer) -> list[str]:
    """The candidate's traceback, where the run kept one (a changed test's)."""
    candidate = reproducer.facts.get("candidate")
    text = candidate.get("traceback") if isinstance(candidate, dict) else None
    return [f"## Traceback (candidate)\n\n```\n{text.rstrip()}\n```", ""] if text else []
