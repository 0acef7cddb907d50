"""Announced or not: does the release's text name a change?

Read by the diff (each change of the API surface) and the calls (each callable whose
behaviour changed). The text is the claims pack (each probe's claim and the release-note
sentence it checks, ``Probe.release_claim``) plus any notes files the user gives. Only
code-like words count as naming something: a dotted name (``torch.switch``, ``F.linear``),
or an identifier with an underscore or a digit and at least five characters
(``reorder_for_locality_in_training``, ``nccl2``). A change is announced when such a word is
its full name, its last two parts, or one of its parts, or is contained in its last part
(``simple_overlap`` names ``enable_simple_overlap``). Plain words ("Inductor", "NVGEMM")
name features, not defaults, so they announce nothing; the matched words are kept with the
change so a reader can judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torchcanary.packs.discovery import installed_probes

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Short spellings the notes use for namespaces.
_ALIASES = {"F": "torch.nn.functional", "nn": "torch.nn", "dist": "torch.distributed"}
_MIN_DISTINCT = 5
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*])|\n\s*\n|\n\s*[-*]\s+")
_QUOTE_CHARS = 240  # a quoted sentence longer than this is cut, with an ellipsis


def _distinctive(word: str) -> bool:
    if "." in word:
        return True
    return len(word) >= _MIN_DISTINCT and ("_" in word or any(c.isdigit() for c in word))


def _expand(word: str) -> str:
    head, _, rest = word.partition(".")
    return f"{_ALIASES[head]}.{rest}" if rest and head in _ALIASES else word


@dataclass(frozen=True)
class ReleaseText:
    """The code-like words of the release's claims and notes, lower-cased, and its sentences
    (so a reader sees the announcement itself, not only the word that matched)."""

    words: frozenset[str]
    sentences: tuple[str, ...] = field(default=())

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> ReleaseText:
        words, sentences = set(), []
        for text in texts:
            for match in _WORD.finditer(text):
                word = match.group(0).strip(".")
                if _distinctive(word):
                    words.add(_expand(word).lower())
            sentences += [" ".join(s.split()) for s in _SENTENCE_END.split(text) if s.strip()]
        return cls(frozenset(words), tuple(sentences))

    def quote(self, words: Iterable[str]) -> str | None:
        """The first sentence that names any of ``words`` (as :meth:`naming` found them)."""
        found = set(words)
        for sentence in self.sentences:
            named = {_expand(m.group(0).strip(".")).lower() for m in _WORD.finditer(sentence)}
            if named & found:
                text = sentence.lstrip("-*# ").strip()
                return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"
        return None

    def naming(self, name: str) -> tuple[str, ...]:
        """The words that name the symbol ``name`` (empty when it is unannounced)."""
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


def claims_pack_texts(probe_descriptions: Iterable[dict[str, str]]) -> list[str]:
    return [
        f"{item.get('claim', '')}\n{item.get('release_claim', '')}" for item in probe_descriptions
    ]


def read_notes(paths: Iterable[str]) -> list[str]:
    return [Path(path).read_text(errors="replace") for path in paths]


def release_text(notes: Iterable[str], extra_modules: tuple[str, ...] = ()) -> ReleaseText:
    """The words of every installed probe's claim (the claims packs, the plugins' probes and
    ``extra_modules``) plus those of the ``notes`` files."""
    described = [probe.describe() for probe, _ in installed_probes(extra_modules).values()]
    return ReleaseText.from_texts([*claims_pack_texts(described), *read_notes(notes)])
