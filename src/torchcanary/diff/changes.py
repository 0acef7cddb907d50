"""What differs between two builds' surfaces: one :class:`SurfaceChange` per name, in plain data.

Pure comparison of two worker collections (``torchcanary.worker.surface.collect``); nothing
here imports torch. The kinds are ordered by how likely they are to change a team's results,
and that order is the report's order.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

_MISSING = object()


class ChangeKind(str, enum.Enum):
    """One word per kind of change; declaration order is severity order."""

    DEFAULT_CHANGED = "default-changed"
    CONFIG_REMOVED = "config-removed"
    API_REMOVED = "api-removed"
    SIGNATURE_CHANGED = "signature-changed"
    ENV_VAR_REMOVED = "env-var-removed"
    BUILD_CHANGED = "build-changed"
    NEWLY_DEPRECATED = "newly-deprecated"
    CONFIG_ADDED = "config-added"
    API_ADDED = "api-added"
    ENV_VAR_ADDED = "env-var-added"


REMOVALS = (ChangeKind.CONFIG_REMOVED, ChangeKind.API_REMOVED)


@dataclass(frozen=True)
class SurfaceChange:
    """One name whose presence, default or signature differs between the two builds.

    ``symbol`` is what user code would write (``torch._inductor.config.max_autotune``,
    ``torch.linalg.polar``, an env var name); ``alters_results`` says whether the change
    can change what existing code computes or whether it still runs.
    """

    kind: ChangeKind
    symbol: str
    baseline: Any = None
    candidate: Any = None
    detail: str = ""
    alters_results: bool = False
    announced: bool = False
    mentions: tuple[str, ...] = ()
    hits: tuple[dict[str, Any], ...] = field(default=())

    @property
    def key(self) -> str:
        return f"{self.kind.value}:{self.symbol}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "symbol": self.symbol,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "detail": self.detail,
            "alters_results": self.alters_results,
            "announced": self.announced,
            "mentions": list(self.mentions),
            "hits": list(self.hits),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SurfaceChange:
        return cls(
            kind=ChangeKind(data["kind"]),
            symbol=data["symbol"],
            baseline=data.get("baseline"),
            candidate=data.get("candidate"),
            detail=data.get("detail", ""),
            alters_results=bool(data.get("alters_results")),
            announced=bool(data.get("announced")),
            mentions=tuple(data.get("mentions", ())),
            hits=tuple(data.get("hits", ())),
        )

    def with_notes(self, mentions: tuple[str, ...]) -> SurfaceChange:
        return replace(self, announced=bool(mentions), mentions=mentions)


def sort_key(change: SurfaceChange) -> tuple[bool, bool, int, str]:
    """Unannounced before announced, results-altering first, then severity, then name."""
    order = list(ChangeKind).index(change.kind)
    return (change.announced, not change.alters_results, order, change.symbol)


# -- configuration ------------------------------------------------------------------------


def _config_symbol(module: str, key: str) -> str:
    # Backend flags and torch's getters are stored under their full spelling already.
    return key if module in ("torch.backends", "torch") else f"{module}.{key}"


def _config_changes(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any]
) -> Iterator[SurfaceChange]:
    for module in sorted(set(baseline) | set(candidate)):
        old, new = baseline.get(module, {}), candidate.get(module, {})
        for key in sorted(set(old) | set(new)):
            symbol = _config_symbol(module, key)
            before, after = old.get(key, _MISSING), new.get(key, _MISSING)
            if before is _MISSING:
                # A new key whose default is on is new behaviour switched on for everyone.
                switched_on = after is True
                yield SurfaceChange(
                    ChangeKind.CONFIG_ADDED,
                    symbol,
                    candidate=after,
                    detail="new key, on by default" if switched_on else "new key",
                    alters_results=switched_on,
                )
            elif after is _MISSING:
                yield SurfaceChange(
                    ChangeKind.CONFIG_REMOVED,
                    symbol,
                    baseline=before,
                    detail="key removed; setting it now fails or does nothing",
                    alters_results=True,
                )
            elif before != after:
                yield SurfaceChange(
                    ChangeKind.DEFAULT_CHANGED,
                    symbol,
                    baseline=before,
                    candidate=after,
                    detail=f"default {_short(before)} -> {_short(after)}",
                    alters_results=True,
                )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- public API ---------------------------------------------------------------------------


def signature_delta(old: list[list[Any]], new: list[list[Any]]) -> tuple[list[str], bool]:
    """What changed between two signatures, and whether existing calls can behave
    differently (a parameter removed or renamed, a default changed, a required one added)."""
    old_by_name = {p[0]: p for p in old}
    new_by_name = {p[0]: p for p in new}
    removed = [p for p in old if p[0] not in new_by_name]
    added = [p for p in new if p[0] not in old_by_name]
    notes: list[str] = []
    breaking = False
    renamed = set()
    for old_param in removed:
        index = old.index(old_param)
        twin = new[index] if index < len(new) else None
        if twin is not None and twin in added and twin[1] == old_param[1]:
            notes.append(f"parameter {old_param[0]} renamed to {twin[0]}")
            renamed.add(twin[0])
        else:
            notes.append(f"parameter {old_param[0]} removed")
        breaking = True
    for param in added:
        if param[0] in renamed:
            continue
        if param[3]:
            notes.append(f"parameter {param[0]}={_short(param[2], 40)} added")
        else:
            notes.append(f"required parameter {param[0]} added")
            breaking = True
    for name, old_param in old_by_name.items():
        new_param = new_by_name.get(name)
        if new_param is None:
            continue
        if (old_param[2], old_param[3]) != (new_param[2], new_param[3]):
            before = _short(old_param[2], 40) if old_param[3] else "required"
            after = _short(new_param[2], 40) if new_param[3] else "required"
            notes.append(f"default of {name}: {before} -> {after}")
            breaking = True
        if old_param[1] != new_param[1]:
            notes.append(f"{name} is now {new_param[1]} (was {old_param[1]})")
            breaking = True
    return notes, breaking


def _entry_changes(
    symbol: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> Iterator[SurfaceChange]:
    if old.get("kind") != new.get("kind"):
        yield SurfaceChange(
            ChangeKind.SIGNATURE_CHANGED,
            symbol,
            baseline=old.get("kind"),
            candidate=new.get("kind"),
            detail=f"was a {old.get('kind')}, now a {new.get('kind')}",
            alters_results=True,
        )
        return
    if old.get("kind") == "value" and old.get("value") != new.get("value"):
        yield SurfaceChange(
            ChangeKind.DEFAULT_CHANGED,
            symbol,
            baseline=old.get("value"),
            candidate=new.get("value"),
            detail=f"value {_short(old.get('value'))} -> {_short(new.get('value'))}",
            alters_results=True,
        )
    old_sig, new_sig = old.get("signature"), new.get("signature")
    # An unreadable signature on either side (a C builtin) is no evidence of a change.
    if old_sig is not None and new_sig is not None and old_sig != new_sig:
        notes, breaking = signature_delta(old_sig, new_sig)
        if notes:
            yield SurfaceChange(
                ChangeKind.SIGNATURE_CHANGED,
                symbol,
                baseline=old_sig,
                candidate=new_sig,
                detail="; ".join(notes),
                alters_results=breaking,
            )
    if new.get("deprecated") and not old.get("deprecated"):
        yield SurfaceChange(
            ChangeKind.NEWLY_DEPRECATED,
            symbol,
            candidate=new["deprecated"],
            detail=f"now deprecated: {new['deprecated']}",
        )


def _api_changes(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any]
) -> Iterator[SurfaceChange]:
    # A namespace missing on one side (import failed, out of time) is not compared.
    for namespace in sorted(set(baseline) & set(candidate)):
        old, new = baseline[namespace], candidate[namespace]
        for name in sorted(set(old) | set(new)):
            symbol = f"{namespace}.{name}"
            if name not in old:
                yield SurfaceChange(
                    ChangeKind.API_ADDED, symbol, candidate=new[name].get("kind"), detail="new"
                )
            elif name not in new:
                yield SurfaceChange(
                    ChangeKind.API_REMOVED,
                    symbol,
                    baseline=old[name].get("kind"),
                    detail=f"{old[name].get('kind')} removed",
                    alters_results=True,
                )
            else:
                yield from _entry_changes(symbol, old[name], new[name])


# -- environment variables and build facts -------------------------------------------------


def _env_changes(
    baseline: Mapping[str, str], candidate: Mapping[str, str]
) -> Iterator[SurfaceChange]:
    for name in sorted(set(baseline) - set(candidate)):
        yield SurfaceChange(
            ChangeKind.ENV_VAR_REMOVED,
            name,
            baseline=baseline[name],
            detail=f"no longer read by the Python sources (was read in {baseline[name]})",
            alters_results=True,
        )
    for name in sorted(set(candidate) - set(baseline)):
        yield SurfaceChange(
            ChangeKind.ENV_VAR_ADDED,
            name,
            candidate=candidate[name],
            detail=f"newly read in {candidate[name]}",
        )


def _build_changes(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any]
) -> Iterator[SurfaceChange]:
    for key in sorted(set(baseline) | set(candidate)):
        before, after = baseline.get(key), candidate.get(key)
        if before != after:
            yield SurfaceChange(
                ChangeKind.BUILD_CHANGED,
                key,
                baseline=before,
                candidate=after,
                detail=f"{before or 'absent'} -> {after or 'absent'}",
                alters_results=True,
            )


def compare_surfaces(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any]
) -> list[SurfaceChange]:
    """Every change from ``baseline`` to ``candidate``, in report order."""
    changes = [
        *_config_changes(baseline.get("config", {}), candidate.get("config", {})),
        *_api_changes(baseline.get("api", {}), candidate.get("api", {})),
        *_env_changes(baseline.get("env_vars", {}), candidate.get("env_vars", {})),
        *_build_changes(baseline.get("build", {}), candidate.get("build", {})),
    ]
    return sorted(changes, key=sort_key)


def counts_by_kind(changes: list[SurfaceChange]) -> dict[str, int]:
    return {kind.value: sum(c.kind is kind for c in changes) for kind in ChangeKind}
