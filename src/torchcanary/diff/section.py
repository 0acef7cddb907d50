"""Section ``diff``: what changed in the build that the notes do not say, and where the
user's code meets it.

``run(ctx)``: a worker in each environment collects its surface (config defaults, public
API with signatures, env vars read, bundled library versions; both at once); each
collection is stored as artifact ``diff/<role>.json`` (``--resume`` reuses it) and, for an
environment that cannot change (``kept.fixed_environment``), kept under
``<cache>/surfaces`` for later runs with the same torchcanary files. The two are
compared, each change is checked against the release's text (the claims pack and any notes
files) and against the user's code, and every change is stored as a row.

Rows (section ``diff``, env_role ``both``; typed as the records of ``diff/result.py``):
  key ``__summary__``: verdict changes|no-changes|not-compared; payload: counts per kind,
    unannounced counts, hits, the scan's files and errors, timings, import failures,
    how values were normalised, what was not checked.
  key ``<kind>:<symbol>``: verdict is the kind (``changes.ChangeKind``); payload: both
    values, detail, alters_results, announced (with the matching words), hits (file, line,
    use) and ``in_use`` (``assess.IN_USE_*``).

A diff that could not be compared (a worker failed) always says no-go.

Policy keys for ``blocking_reasons`` (defaults):
  diff_block_on_removed = True          the code uses a removed function, class or config key
  diff_block_on_relied_default = True   the code reads a changed default it never sets
  diff_block_on_signature = False       the code calls a function whose parameters changed
  diff_block_on_unannounced = False     any unannounced change that can alter results,
                                        used by the code or not
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torchcanary.context import ROLES, RunContext
from torchcanary.diff import settings as diff_settings
from torchcanary.diff.assess import (
    IN_USE_RELIED_DEFAULT,
    IN_USE_REMOVED,
    IN_USE_SIGNATURE,
    NORMALISATION,
    NOT_CHECKED,
    SurfaceDiff,
    assess,
    in_use,
)
from torchcanary.diff.changes import SurfaceChange, counts_by_kind
from torchcanary.diff.result import DiffChange, DiffSummary, from_json, from_rows
from torchcanary.diff.settings import DiffSettings
from torchcanary.envs.cache import cache_root
from torchcanary.envs.worker_process import CallResult
from torchcanary.kept import KeptFolder, entry_key, fixed_environment, own_files_digest
from torchcanary.plan import RunPlan
from torchcanary.release_text import release_text
from torchcanary.results import ComparisonStatus
from torchcanary.section_types import PlannedUnit
from torchcanary.store.rows import BOTH, SUMMARY_KEY, SectionResult
from torchcanary.worker.calls import COLLECT_SURFACE

SECTION = "diff"
_KEPT_SCHEMA = 1  # the format of the surfaces kept under <cache>/surfaces
REUSED_KEY = "reused_made_at"  # in a collection kept from an earlier run: when it was made
# The comparison is checked when both surfaces were read and diffed; not-compared is not.
CHECKED_VERDICTS = frozenset((ComparisonStatus.CHANGES.value, ComparisonStatus.NO_CHANGES.value))
POLICY_DEFAULTS: dict[str, Any] = {
    "diff_block_on_removed": True,
    "diff_block_on_relied_default": True,
    "diff_block_on_signature": False,
    "diff_block_on_unannounced": False,
}


def parse_settings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``[tool.torchcanary.diff]`` (see ``surface.settings`` for the keys)."""
    return diff_settings.parse_settings(mapping)


def outputs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the diff offers the other sections: ``release_notes``, the notes files whose
    words (with the claims pack's) announce a change; the calls quote them too."""
    return {"release_notes": list(settings.get("notes", ()))}


def _artifact_name(role: str) -> str:
    return f"diff/{role}.json"


def _stored_collections(ctx: RunContext) -> dict[str, dict[str, Any]]:
    wanted = {_artifact_name(role): role for role in ROLES}
    return {
        wanted[name]: json.loads(content)
        for name, _, content in ctx.store.artifacts(ctx.run_id)
        if name in wanted
    }


def _collect(ctx: RunContext, settings: DiffSettings) -> dict[str, CallResult]:
    """Each environment's surface: kept from an earlier run where it cannot have changed
    (the same fixed environment, torchcanary files and collection settings), else
    collected now by a worker, both at once."""
    kwargs = {"namespaces": list(settings.namespaces) or None, "budget_s": settings.budget_s}
    kept = KeptFolder(
        cache_root() / "surfaces", _KEPT_SCHEMA, "the kept surface", ctx.progress.note
    )
    manifests = {role: row.manifest for role, row in ctx.store.environments(ctx.run_id).items()}
    keys = {}
    for role in ROLES:
        environment = fixed_environment(ctx.environments[role], manifests.get(role))
        if environment is not None:
            ingredients = {"environment": environment, "torchcanary_files": own_files_digest()}
            keys[role] = (entry_key(_KEPT_SCHEMA, {**ingredients, **kwargs}), ingredients)
    results = {}
    for role, (key, _) in keys.items():
        hit = kept.load(key)
        if hit is not None:
            value, made_at = hit
            results[role] = CallResult("ok", {**value, REUSED_KEY: made_at})
    todo = [role for role in ROLES if role not in results]
    workers = {role: ctx.new_worker(role) for role in todo}
    with ThreadPoolExecutor(max(1, len(todo))) as pool:
        futures = {
            role: pool.submit(worker.call, COLLECT_SURFACE, kwargs, settings.timeout_s)
            for role, worker in workers.items()
        }
        for role, future in futures.items():
            results[role] = call = future.result()
            # A collection cut short by its budget depends on how fast the machine was.
            if role in keys and call.ok and not call.value.get("skipped_namespaces"):
                kept.save(keys[role][0], call.value, keys[role][1])
    if len(todo) < len(ROLES):
        ctx.progress.note(
            "diff: reused the surface of "
            + ", ".join(role for role in ROLES if role not in todo)
            + " from an earlier run (the same environment and torchcanary)"
        )
    return {role: results[role] for role in ROLES}


def code_root(ctx: RunContext, settings: DiffSettings) -> Path | None:
    """``diff.code``, else the stack's project when the stack has a command, else none."""
    if settings.code:
        return Path(settings.code)
    stack = ctx.plan.section_settings("stack")
    return Path(stack["cwd"]) if stack.get("command") and stack.get("cwd") else None


def summary_payload(
    diff: SurfaceDiff, collections: dict[str, dict[str, Any]], section_s: float
) -> dict[str, Any]:
    changes = list(diff.changes)
    unannounced = [c for c in changes if not c.announced]
    in_use_counts = Counter(in_use(c) for c in changes if in_use(c))
    reused = {r: c[REUSED_KEY] for r, c in collections.items() if REUSED_KEY in c}
    return ({"reused_made_at": reused} if reused else {}) | {
        "counts": counts_by_kind(changes),
        "unannounced_counts": counts_by_kind(unannounced),
        "unannounced_altering": sum(c.alters_results for c in unannounced),
        "announced": len(changes) - len(unannounced),
        "total": len(changes),
        "in_use": dict(sorted(in_use_counts.items())),
        "hits": len(diff.scan.hits) if diff.scan else 0,
        "scan": diff.scan.to_json() | {"hits": len(diff.scan.hits)} if diff.scan else None,
        "torch_versions": {r: c.get("torch_version") for r, c in collections.items()},
        "timings_s": {r: c.get("timings_s", {}) for r, c in collections.items()},
        "import_failures": {r: c.get("import_failures", {}) for r, c in collections.items()},
        "skipped_namespaces": {r: c.get("skipped_namespaces", []) for r, c in collections.items()},
        "section_s": round(section_s, 2),
        "normalisation": NORMALISATION,
        "not_checked": list(NOT_CHECKED),
    }


def change_payload(change: SurfaceChange) -> dict[str, Any]:
    return change.to_json() | {"in_use": in_use(change)}


def run(ctx: RunContext) -> None:
    started = time.monotonic()
    settings = DiffSettings.from_json(ctx.plan.section_settings(SECTION))
    done = ctx.store.done_section_keys(ctx.run_id, SECTION) if ctx.resume else set()
    if (SUMMARY_KEY, BOTH) in done:
        return
    collections = _stored_collections(ctx) if ctx.resume else {}
    if set(collections) != set(ROLES):
        ctx.progress.note("diff: collecting both builds' surfaces")
        calls = _collect(ctx, settings)
        failed = {role: call for role, call in calls.items() if not call.ok}
        if failed:
            reason = "; ".join(
                f"{role}: {call.status}: {call.error}" for role, call in failed.items()
            )
            _save(ctx, SUMMARY_KEY, ComparisonStatus.NOT_COMPARED.value, {"reason": reason})
            ctx.progress.note(f"diff: not compared: {reason}")
            return
        for role, call in calls.items():
            collections[role] = call.value
            ctx.store.save_artifact(
                ctx.run_id,
                _artifact_name(role),
                "application/json",
                json.dumps(call.value).encode(),
            )
    diff = assess(
        collections["baseline"],
        collections["candidate"],
        release_text(settings.notes, tuple(ctx.plan.outputs.get("probe_modules", ()))),
        code_root(ctx, settings),
    )
    for change in diff.changes:
        _save(ctx, change.key, change.kind.value, change_payload(change))
    payload = summary_payload(diff, collections, time.monotonic() - started)
    verdict = ComparisonStatus.CHANGES if diff.changes else ComparisonStatus.NO_CHANGES
    _save(ctx, SUMMARY_KEY, verdict.value, payload)
    ctx.progress.note(
        f"diff: {payload['total']} change(s), {payload['total'] - payload['announced']} "
        f"unannounced, {payload['hits']} hit(s) in your code"
    )


def _save(ctx: RunContext, key: str, verdict: str, payload: dict[str, Any]) -> None:
    """Store one row as its typed record (``diff/result.py``)."""
    record = from_json({"key": key, "env_role": BOTH, "verdict": verdict, "payload": payload})
    ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))


def _listed(rows: list[DiffChange], limit: int = 5) -> str:
    names = ", ".join(row.name for row in rows[:limit])
    return names + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def planned_units(plan: RunPlan) -> list[PlannedUnit]:
    """One unit: the comparison of the two builds' public surfaces."""
    return [PlannedUnit(SUMMARY_KEY, BOTH)]


def blocking_reasons(view: Any, policy: dict[str, Any]) -> list[str]:
    """Why the diff says no-go under ``policy`` (keys and defaults in the module docstring)."""
    rules = {**POLICY_DEFAULTS, **policy}
    records = from_rows(view.sections.get(SECTION, []))
    if not records:
        return []
    summary = next((r for r in records if isinstance(r, DiffSummary)), None)
    if summary is None:
        return ["diff: the comparison did not finish; run again with --resume"]
    if summary.verdict is ComparisonStatus.NOT_COMPARED:  # the core's rule (``accounting.py``)
        return []
    changes = [r for r in records if isinstance(r, DiffChange)]
    reasons = []
    for use, rule, words in (
        (IN_USE_REMOVED, "diff_block_on_removed", "uses removed name(s)"),
        (IN_USE_RELIED_DEFAULT, "diff_block_on_relied_default", "relies on changed default(s)"),
        (IN_USE_SIGNATURE, "diff_block_on_signature", "calls changed signature(s)"),
    ):
        found = [r for r in changes if r.in_use == use]
        if found and rules[rule]:
            reasons.append(f"diff: your code {words}: {_listed(found)}")
    if rules["diff_block_on_unannounced"]:
        silent = [r for r in changes if r.unannounced_altering]
        if silent:
            reasons.append(
                f"diff: {len(silent)} unannounced change(s) that can alter results: "
                f"{_listed(silent)}"
            )
    return reasons
