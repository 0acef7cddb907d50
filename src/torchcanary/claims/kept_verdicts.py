"""Claim verdicts reused from an earlier run, in the same environment on the same machine.

Orchestrator side. What a probe finds depends on the environment it runs in, its own code
and torchcanary's, what it is asked (the torch version the environment should hold, its
timeout) and the machine. An environment torchcanary built from requirements is never
changed after its build (other requirements make another folder), so while none of those
inputs changed, running the probe again would only repeat its answer: a warm run would pay
a minute for nothing, and a CI job qualifying one candidate after another would re-check
its unchanged baseline every time. The verdict is kept under the torchcanary cache
(``<cache>/claim-verdicts/<key>.json``, a :class:`kept.KeptFolder`) under a key made
of:

- the environment: its spec, folder, interpreter, and the manifest the run just collected
  inside it (torch build and configuration, Python, OS, CPU model and count, GPUs);
- the NVIDIA driver version where there is one (the manifest does not hold it);
- the probe: its id, module and the content of its module's file, and the content of every
  source file of torchcanary (the worker that runs it, the probe helpers);
- its parameters for this environment and its timeout.

Reused are only verdicts that say something about the claim (confirmed, refuted, absent,
not checkable here): an error, a crash or a timeout runs again. Never reused: environments
given as an interpreter or ``current`` (packages can be installed into them between runs),
and timed probes (a time is one sample of a noisy machine, not a fact). A reused result
says so in its evidence (``reused``: the run that made it and when); ``--fresh-claims``
runs every probe again and replaces what was kept.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchcanary.envs.cache import Environment
from torchcanary.kept import (
    KeptFolder,
    entry_key,
    files_digest,
    fixed_environments,
    own_files_digest,
)
from torchcanary.probe_result import Outcome, ProbeResult, Verdict
from torchcanary.results import Manifest

CACHE_SCHEMA = 1
REUSED = "reused"  # the evidence key a reused result carries
_REUSABLE = frozenset((Verdict.CONFIRMED, Verdict.REFUTED, Verdict.ABSENT, Verdict.NOT_CHECKABLE))
_NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


def module_digest(module: str) -> str | None:
    """The content digest of the file (or package folder) ``module`` is loaded from."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return None
    origin = Path(spec.origin)
    return files_digest([origin.parent if origin.name == "__init__.py" else origin])


def _driver() -> str:
    try:
        return _NVIDIA_DRIVER.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return ""


def _check(value: Any) -> str | None:
    try:
        outcome = Outcome.from_json(value["outcome"])
    except (KeyError, TypeError, ValueError) as exc:
        return f"it holds no probe outcome ({type(exc).__name__})"
    if outcome.verdict not in _REUSABLE:
        return f"it holds a {outcome.verdict.value}, which is never reused"
    return None


@dataclass(frozen=True)
class ProbeKey:
    """One probe in one environment: the key of its kept verdict, and what it was made of."""

    key: str
    ingredients: dict[str, Any]


class KeptVerdicts:
    """The kept verdicts of one run's environments; ``fresh`` makes every one again."""

    def __init__(
        self,
        directory: Path,
        environments: dict[str, Environment],
        manifests: dict[str, Manifest],
        profile: str,
        fresh: bool,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.cache = KeptFolder(directory, CACHE_SCHEMA, "the kept claim verdict", warn)
        self.fresh = fresh
        self._environments = fixed_environments(environments, manifests, profile)
        self._shared = {"torchcanary_files": own_files_digest(), "nvidia_driver": _driver()}
        self._module_digests: dict[str, str | None] = {}  # read once, for both environments

    def key(
        self, role: str, probe_id: str, module: str, params: dict[str, Any], timeout_s: float
    ) -> ProbeKey | None:
        """The key of this probe's verdict in ``role``; None where it is never reused."""
        environment = self._environments.get(role)
        if module not in self._module_digests:
            self._module_digests[module] = module_digest(module)
        digest = self._module_digests[module]
        if environment is None or digest is None:
            return None
        ingredients = {
            "environment": environment,
            **self._shared,
            "probe": {"id": probe_id, "module": module, "module_files": digest},
            "params": params,
            "timeout_s": timeout_s,
        }
        return ProbeKey(entry_key(CACHE_SCHEMA, ingredients), ingredients)

    def load(self, key: ProbeKey, run_id: str, role: str, probe_id: str) -> ProbeResult | None:
        """The kept result, as this run's, its evidence saying where it came from."""
        if self.fresh:
            return None
        found = self.cache.load(key.key, _check)
        if found is None:
            return None
        value, made_at = found
        outcome = Outcome.from_json(value["outcome"])
        reused = {"run_id": value["run_id"], "made_at": made_at}
        return ProbeResult(
            run_id,
            role,
            probe_id,
            replace(outcome, evidence={**outcome.evidence, REUSED: reused}),
            float(value["duration_s"]),
            time.time(),
        )

    def load_all(
        self, keys: dict[tuple[str, str], ProbeKey | None], run_id: str
    ) -> dict[tuple[str, str], ProbeResult]:
        """The kept results of every ``(role, probe id)`` that has one."""
        found = {
            item: self.load(key, run_id, *item) for item, key in keys.items() if key is not None
        }
        return {item: result for item, result in found.items() if result is not None}

    def keep(self, key: ProbeKey, result: ProbeResult) -> None:
        """Keep ``result`` for later runs where its verdict says something about the claim."""
        if result.outcome.verdict not in _REUSABLE or REUSED in result.outcome.evidence:
            return
        value = {
            "run_id": result.run_id,
            "outcome": result.outcome.to_json(),
            "duration_s": result.duration_s,
        }
        self.cache.save(key.key, value, key.ingredients)


def reused_from(result: ProbeResult) -> dict[str, Any] | None:
    """Where a reused result came from (``run_id``, ``made_at``); None for one made here."""
    found = result.outcome.evidence.get(REUSED)
    return found if isinstance(found, dict) else None
