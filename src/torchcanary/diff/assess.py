"""From two collections to the finished diff: changes, announced or not, and the user's hits.

Pure: the section feeds it what the workers collected, tests and the benchmark feed it the
same, and nothing here touches a store or a process.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchcanary.diff.changes import REMOVALS, ChangeKind, SurfaceChange, compare_surfaces
from torchcanary.diff.codescan import ChangedNames, ScanResult, scan_code
from torchcanary.release_text import ReleaseText

# How a change reaches the user's code, worst first; the policy blocks on the first three.
IN_USE_REMOVED = "uses-removed"
IN_USE_RELIED_DEFAULT = "relies-on-changed-default"
IN_USE_SIGNATURE = "calls-changed-signature"
IN_USE_OVERRIDDEN = "sets-changed-default"
IN_USE_OTHER = "uses"

NORMALISATION = (
    "Paths under each environment (site-packages, prefix, home, temp) are replaced by "
    "placeholders; memory addresses are dropped from reprs; functions and classes are named "
    "by module and qualified name; sets are sorted, dict keys are sorted; non-finite floats "
    "are written as text; type annotations are left out of signatures; a signature that "
    "cannot be read in one build (a C builtin) is not compared."
)
NOT_CHECKED = (
    "Calls that now raise: not attempted, since calling every public function with made-up "
    "arguments in the target environment is neither cheap nor safe.",
    "Environment variables read only by native code (libtorch, NCCL): the scan reads the "
    "package's Python sources, not its shared libraries.",
    "Tensor methods called on a value (x.qr()): without types they cannot be told from other "
    "objects' methods; only torch.Tensor.name spellings hit.",
    "Deprecations announced only by a warning inside a function body: only __deprecated__ "
    "markers are read, so a deprecation turned into an error shows as a signature or "
    "removal change, or not at all.",
    "Defaults reached only indirectly (every torch.compile call runs on all Inductor "
    "defaults) do not count as relied on; only keys the code reads do.",
)


@dataclass(frozen=True)
class SurfaceDiff:
    changes: tuple[SurfaceChange, ...]
    scan: ScanResult | None


def changed_names(changes: list[SurfaceChange], collections: list[dict[str, Any]]) -> ChangedNames:
    env_kinds = (ChangeKind.ENV_VAR_ADDED, ChangeKind.ENV_VAR_REMOVED)
    config_modules = {
        module
        for collection in collections
        for module in collection.get("config", {})
        if module not in ("torch", "torch.backends")
    }
    return ChangedNames(
        symbols=frozenset(
            c.symbol.removesuffix("()")
            for c in changes
            if c.kind not in env_kinds and c.kind is not ChangeKind.BUILD_CHANGED
        ),
        env_vars=frozenset(c.symbol for c in changes if c.kind in env_kinds),
        config_modules=frozenset(config_modules),
    )


def in_use(change: SurfaceChange) -> str | None:
    """How the user's code meets ``change`` (None: it does not)."""
    if not change.hits:
        return None
    uses = {hit["use"] for hit in change.hits}
    if change.kind in REMOVALS:
        return IN_USE_REMOVED
    if change.kind is ChangeKind.DEFAULT_CHANGED:
        # Setting the key anywhere means the code chose its value; reading it without ever
        # setting it means the code runs on whatever the build's default is.
        return IN_USE_OVERRIDDEN if "set" in uses else IN_USE_RELIED_DEFAULT
    if change.kind is ChangeKind.SIGNATURE_CHANGED and change.alters_results:
        return IN_USE_SIGNATURE
    return IN_USE_OTHER


def assess(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    release_text: ReleaseText,
    code_root: Path | None,
) -> SurfaceDiff:
    changes = [
        change.with_notes(release_text.naming(change.symbol))
        for change in compare_surfaces(baseline, candidate)
    ]
    if code_root is None:
        return SurfaceDiff(tuple(changes), None)
    scan = scan_code(code_root, changed_names(changes, [baseline, candidate]))
    by_symbol: dict[str, list[dict[str, Any]]] = {}
    for hit in scan.hits:
        by_symbol.setdefault(hit.symbol, []).append(hit.to_json())
    with_hits = [
        replace(change, hits=tuple(by_symbol.get(change.symbol.removesuffix("()"), ())))
        for change in changes
    ]
    return SurfaceDiff(tuple(with_hits), scan)
