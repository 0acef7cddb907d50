"""Facts of a fixed environment kept from an earlier run, and reused while nothing they
depend on has changed.

Orchestrator side. Some of what the bench learns in an environment is a fact of that
environment, the machine and the request, not a sample to judge: which kernels a benchmark
dispatches to (``kept_dispatch.py``), the machine's roofline as the environment sees it
(``kept_rooflines.py``). In an environment torchcanary built from requirements (never
changed after its build), on the same machine and with the same torchcanary, finding it
again only repeats seconds of every warm run. Each kind lives in its own folder of
:class:`kept.KeptFolder` entries, keyed by:

- the environment and the manifest this run collected in it
  (:func:`kept.fixed_environment`: torch build, Python, OS, CPU model and count, GPUs);
- the content of torchcanary's source files (the code that found the fact);
- the request as that side made it.

Never kept: anything about a user's workload (its code is outside the key), an
environment with packages installed over it for this run, and a fact that failed or that
its kind's check refuses. A reused fact says so in ``reused`` (the run that found it, and
when).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary.envs.cache import Environment
from torchcanary.kept import KeptFolder, entry_key, fixed_environments, own_files_digest
from torchcanary.results import Manifest
from torchcanary.worker.bench.specs import WORKLOAD

REUSED = "reused"  # the key a reused fact carries: {"run_id", "made_at"}


@dataclass(frozen=True)
class FactKind:
    """One kind of fact: where it is kept, its entries' format, and what makes one usable."""

    folder: str  # under the torchcanary cache
    schema: int
    what: str  # names an entry in warnings ("the kept roofline")
    check: Callable[[dict[str, Any]], str | None]  # what is wrong with a fact, or None
    max_age_s: float | None = None  # None: for as long as the key holds


class KeptFacts:
    """One kind of fact, kept per environment of one run (only those it may reuse)."""

    def __init__(
        self,
        kind: FactKind,
        directory: Path,
        environments: dict[str, Environment],
        manifests: dict[str, Manifest],
        run_id: str,
        profile: str,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.kind = kind
        self.cache = KeptFolder(directory, kind.schema, kind.what, warn)
        self._run_id = run_id
        self._environments = fixed_environments(environments, manifests, profile)

    def _key(self, role: str, request: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        environment = self._environments.get(role)
        if environment is None or request.get("kind") == WORKLOAD:
            return None
        ingredients = {
            "environment": environment,
            "torchcanary_files": own_files_digest(),
            "request": request,
        }
        return entry_key(self.cache.schema, ingredients), ingredients

    def _check_entry(self, value: Any) -> str | None:
        fact = value.get("fact") if isinstance(value, dict) else None
        return self.kind.check(fact) if isinstance(fact, dict) else "it holds no fact"

    def load(self, role: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The fact kept for ``request`` in ``role``, marked as reused; None if none."""
        key = self._key(role, request)
        found = self.cache.load(key[0], self._check_entry) if key else None
        if found is None:
            return None
        value, made_at = found
        if self.kind.max_age_s is not None and time.time() - made_at > self.kind.max_age_s:
            return None
        return {**value["fact"], REUSED: {"run_id": value["run_id"], "made_at": made_at}}

    def keep(self, role: str, request: dict[str, Any], fact: dict[str, Any]) -> None:
        """Keep a fact this run found, for later runs."""
        key = self._key(role, request)
        if key is None or "error" in fact or REUSED in fact or self.kind.check(fact):
            return
        self.cache.save(key[0], {"run_id": self._run_id, "fact": fact}, key[1])
