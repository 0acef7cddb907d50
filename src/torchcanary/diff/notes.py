"""Announced or not: does the release's text name a change?

The text is the claims pack (each probe's claim and the release-note sentence it checks,
``Probe.release_claim``) plus any notes files the user gives. Only code-like words count as
naming something: a dotted name (``torch.switch``, ``F.linear``), or an identifier with an
underscore or a digit and at least five characters (``reorder_for_locality_in_training``,
``nccl2``). A change is announced when such a word is its full name, its last two parts, or
one of its parts, or is contained in its last part (``simple_overlap`` names
``enable_simple_overlap``). Plain words ("Inductor", "NVGEMM") name features, not defaults,
so they announce nothing; the matched words are kept with the change so a reader can judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torchcanary.diff.changes import SurfaceChange

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Short spellings the notes use for namespaces.
_ALIASES = {"F": "torch.nn.functional", "nn": "torch.nn", "dist": "torch.distributed"}
_MIN_DISTINCT = 5


def _distinctive(word: str) -> bool:
    if "." in word:
        return True
    return len(word) >= _MIN_DISTINCT and ("_" in word or any(c.isdigit() for c in word))


def _expand(word: str) -> str:
    head, _, rest = word.partition(".")
    return f"{_ALIASES[head]}.{rest}" if rest and head in _ALIASES else word


@dataclass(frozen=True)
class ReleaseText:
    """The code-like words of the release's claims and notes, lower-cased."""

    words: frozenset[str]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> ReleaseText:
        words = set()
        for text in texts:
            for match in _WORD.finditer(text):
                word = match.group(0).strip(".")
                if _distinctive(word):
                    words.add(_expand(word).lower())
        return cls(frozenset(words))

    def mentions(self, change: SurfaceChange) -> tuple[str, ...]:
        """The words that name ``change`` (empty when it is unannounced)."""
        return self.naming(change.symbol)

    def naming(self, name: str) -> tuple[str, ...]:
        """The words that name the symbol ``name`` (also read by the calls section)."""
        symbol = name.lower().removesuffix("()")
        parts = symbol.split(".")
        names = {symbol, ".".join(parts[-2:])} | set(parts)
        leaf = parts[-1]
        found = sorted(
            word
            for word in self.words
            if word in names or ("." not in word and len(word) >= 8 and word in leaf)
        )
        return tuple(found)

    def annotate(self, changes: Iterable[SurfaceChange]) -> list[SurfaceChange]:
        return [change.with_notes(self.mentions(change)) for change in changes]


def claims_pack_texts(probe_descriptions: Iterable[dict[str, str]]) -> list[str]:
    return [
        f"{item.get('claim', '')}\n{item.get('release_claim', '')}" for item in probe_descriptions
    ]


def read_notes(paths: Iterable[str]) -> list[str]:
    return [Path(path).read_text(errors="replace") for path in paths]
