"""What a benchmark ran, reused from an earlier run of the same fixed environment.

Orchestrator side. A dispatch profile (:mod:`.dispatch`) lists the operators, kernels and
library calls one call of a benchmark reaches, with their counts per call: a fact of the
environment, the machine and the benchmark, not a timing. In an environment torchcanary
built from requirements (never changed after its build), on the same machine and with the
same torchcanary, it comes out the same every run, so profiling it again only repeated
seconds of every warm run. It is kept under ``<cache>/dispatch-profiles/`` (a
:class:`keyed_cache.KeyedCache`), keyed by:

- the environment and the manifest this run collected in it
  (:func:`keyed_cache.fixed_environment`: torch build, Python, OS, CPU model and count, GPUs);
- the content of torchcanary's source files (the benchmarks and the profiler live there);
- the benchmark's spec as that side ran it.

Never reused: a user's workload (its code is outside the key), an environment with packages
installed over it for this run, and a profile that failed. A reused profile says so in
``reused`` (the run that made it, and when).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchcanary.envs.cache import Environment
from torchcanary.keyed_cache import KeyedCache, entry_key, fixed_environments, own_files_digest
from torchcanary.results import Manifest

CACHE_SCHEMA = 1
REUSED = "reused"  # the key a reused profile carries: {"run_id", "made_at"}
_VIEWS = ("ops", "kernels", "library_calls")


def _check(value: Any) -> str | None:
    profile = value.get("profile") if isinstance(value, dict) else None
    if not isinstance(profile, dict) or not all(isinstance(profile.get(v), dict) for v in _VIEWS):
        return "it holds no dispatch profile"
    return None


class DispatchReuse:
    """The kept dispatch profiles of one run's environments (only those it may reuse)."""

    def __init__(
        self,
        directory: Path,
        environments: dict[str, Environment],
        manifests: dict[str, Manifest],
        run_id: str,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.cache = KeyedCache(directory, CACHE_SCHEMA, "the kept dispatch profile", warn)
        self._run_id = run_id
        self._environments = fixed_environments(environments, manifests)

    def _key(self, role: str, spec: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        environment = self._environments.get(role)
        if environment is None or spec.get("kind") == "workload":
            return None
        ingredients = {
            "environment": environment,
            "torchcanary_files": own_files_digest(),
            "spec": spec,
        }
        return entry_key(CACHE_SCHEMA, ingredients), ingredients

    def load(self, role: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The profile kept for ``spec`` in ``role``, marked as reused; None if none."""
        key = self._key(role, spec)
        found = self.cache.load(key[0], _check) if key else None
        if found is None:
            return None
        value, made_at = found
        return {**value["profile"], REUSED: {"run_id": value["run_id"], "made_at": made_at}}

    def keep(self, role: str, spec: dict[str, Any], profile: dict[str, Any]) -> None:
        """Keep a profile this run made, for later runs."""
        key = self._key(role, spec)
        if key is None or "error" in profile or REUSED in profile:
            return
        self.cache.save(key[0], {"run_id": self._run_id, "profile": profile}, key[1])
