"""What an explanation is, as plain data: the causes of one finding and their shares.

A finding (a slower benchmark, a changed test outcome, ...) gets one :class:`Explanation`;
each measured cause is a :class:`Cause` with the share of the finding's delta it accounts
for and that share's interval from repeated measurement. What no cause accounts for is the
explanation's ``unexplained`` share, never spread over the causes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from torchcanary.results import payload_version
from torchcanary.store.rows import BOTH, SUMMARY_KEY

SCHEMA_VERSION = 1
SECTION = "explain"


class ExplainStatus(str, enum.Enum):
    """How far a finding was explained; the one verdict vocabulary of the explain section."""

    EXPLAINED = "explained"  # the causes' shares account for the delta (interval holds 100 %)
    PARTLY = "partly-explained"  # some of it; the rest is "unexplained"
    UNEXPLAINED = "unexplained"  # causes were measured, none accounts for any of it
    NOT_CHECKED = "not-checked"  # nothing measured (budget, no way to re-measure, ...)
    DONE = "done"  # the section's summary row: it ran (``mode`` says how)

    def __str__(self) -> str:
        return self.value


VIEW = "view"  # another view of the same change: its shares as detail, never beside the parts


def view_of(name: str, causes: list[Cause]) -> Cause:
    """``causes`` (shares of the same change measured another way) as one cause without a
    share, the shares as its detail: they overlap the decomposition's parts, never add to
    them."""
    return Cause(
        VIEW,
        name,
        evidence="the same change seen another way: these shares overlap the parts, "
        "they do not add to them",
        detail={"within": [f"{c.describe()}. {c.evidence}".rstrip() for c in causes]},
    )


@dataclass(frozen=True)
class Cause:
    """One cause of a finding and the share of its delta it explains.

    ``kind``: what sort of cause (``module``, ``library``, ``build``, ``setting``, ``op``,
    ``compile-phase``, ``api-change``); ``share`` is a fraction of the finding's delta (1.0
    is all of it) with ``share_low``/``share_high`` its interval (None where the share is
    not a measured quantity, e.g. a linked API change); ``evidence`` says what was measured
    in words; ``reproduce`` is the command that measures it again.
    """

    kind: str
    name: str
    share: float | None = None
    share_low: float | None = None
    share_high: float | None = None
    evidence: str = ""
    reproduce: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "share": self.share,
            "share_low": self.share_low,
            "share_high": self.share_high,
            "evidence": self.evidence,
            "reproduce": self.reproduce,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cause:
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            share=data.get("share"),
            share_low=data.get("share_low"),
            share_high=data.get("share_high"),
            evidence=str(data.get("evidence", "")),
            reproduce=str(data.get("reproduce", "")),
            detail=dict(data.get("detail") or {}),
        )

    def describe(self) -> str:
        """``settings ATEN_CPU_CAPABILITY: 92 % [81 %, 103 %]`` (the share in words)."""
        return f"{self.kind} {self.name}: {share_text(self.share, self.share_low, self.share_high)}"


@dataclass(frozen=True)
class Explanation:
    """Why one finding of another section moved, stored as a row of the explain section.

    ``key`` is ``<section>:<item>``; ``delta`` is the finding's change in its own words
    (``+21 % (1.31 s -> 1.58 s)``); ``causes`` best first; ``unexplained`` the share of the
    delta no measured cause accounts for, with its interval; ``seconds`` what explaining
    it cost; ``not_checked`` why parts were not measured (``budget``, ``needs a GPU``...).
    """

    key: str
    verdict: ExplainStatus
    section: str = ""
    item: str = ""
    delta: str = ""
    causes: tuple[Cause, ...] = ()
    unexplained: float | None = None
    unexplained_low: float | None = None
    unexplained_high: float | None = None
    seconds: float = 0.0
    not_checked: tuple[str, ...] = ()
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        payload = {
            **self.extra,
            "schema": self.schema_version,
            "section": self.section,
            "item": self.item,
            "delta": self.delta,
            "causes": [cause.to_json() for cause in self.causes],
            "unexplained": self.unexplained,
            "unexplained_low": self.unexplained_low,
            "unexplained_high": self.unexplained_high,
            "seconds": self.seconds,
            "not_checked": list(self.not_checked),
        }
        return {
            "key": self.key,
            "env_role": self.env_role,
            "verdict": self.verdict.value,
            "payload": payload,
        }


@dataclass(frozen=True)
class ExplainSummary:
    """The explain section's run (key ``__summary__``): how, within what budget, at what cost."""

    verdict: ExplainStatus = ExplainStatus.DONE
    mode: str = "quick"
    findings: int = 0
    budget_s: float | None = 0.0  # None: no cap (--explain full)
    seconds: float = 0.0
    key: str = SUMMARY_KEY
    env_role: str = BOTH
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        payload = {
            "schema": self.schema_version,
            "mode": self.mode,
            "findings": self.findings,
            "budget_s": self.budget_s,
            "seconds": self.seconds,
        }
        return {
            "key": self.key,
            "env_role": self.env_role,
            "verdict": self.verdict.value,
            "payload": payload,
        }


_KNOWN = frozenset(
    (
        "schema",
        "section",
        "item",
        "delta",
        "causes",
        "unexplained",
        "unexplained_low",
        "unexplained_high",
        "seconds",
        "not_checked",
    )
)


def from_json(data: dict[str, Any]) -> Explanation | ExplainSummary:
    """One stored explain row ``{key, env_role, verdict, payload}`` as its record."""
    payload = dict(data.get("payload") or {})
    payload_version(payload, SCHEMA_VERSION)
    if data["key"] == SUMMARY_KEY:
        budget = payload.get("budget_s", 0.0)  # None: --explain full, which has no cap
        return ExplainSummary(
            mode=str(payload.get("mode", "quick")),
            findings=int(payload.get("findings") or 0),
            budget_s=None if budget is None else float(budget or 0.0),
            seconds=float(payload.get("seconds") or 0.0),
        )
    return Explanation(
        key=str(data["key"]),
        verdict=ExplainStatus(data["verdict"]),
        section=str(payload.get("section", "")),
        item=str(payload.get("item", "")),
        delta=str(payload.get("delta", "")),
        causes=tuple(Cause.from_json(c) for c in payload.get("causes") or ()),
        unexplained=payload.get("unexplained"),
        unexplained_low=payload.get("unexplained_low"),
        unexplained_high=payload.get("unexplained_high"),
        seconds=float(payload.get("seconds") or 0.0),
        not_checked=tuple(payload.get("not_checked") or ()),
        env_role=str(data.get("env_role", BOTH)),
        extra={k: v for k, v in payload.items() if k not in _KNOWN},
    )


def share_text(share: float | None, low: float | None, high: float | None) -> str:
    """``92 % [81 %, 103 %]``; ``not measured`` without a share."""
    if share is None:
        return "not measured"
    if low is None or high is None:
        return f"{share:.0%}"
    return f"{share:.0%} [{low:.0%}, {high:.0%}]"
