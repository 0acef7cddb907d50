"""Turns a release-notes text into a draft pack: one claim per claim-bearing sentence.

Offline and deterministic. The notes are read as a user saves them (Markdown or plain
text): headings open sections, bullets and paragraphs hold sentences. Sections that are
commentary (our take, sources, ...) are kept out; every other sentence is a claim. A claim
is matched to an existing probe when a fragment the probe quotes from the notes appears
in it; the rest are marked unprobed, so nothing in the notes goes silently unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torchcanary.packs.model import Pack, PackClaim, sha256_of
from torchcanary.probe import Probe

# Headings whose sections are opinion or references, not claims of the release.
COMMENTARY_HEADINGS = ("our take", "take", "opinion", "commentary", "sources", "references")
_BULLET = re.compile(r"^\s*(?:[-*+•·]|\d+[.)])\s+")
_MD_HEADING = re.compile(r"^\s*#{1,6}\s+")
# A sentence ends at . ! ? followed by space and a capital, digit, quote or @ (not "torch.cond").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9@\"“(`])")
_MIN_FRAGMENT = 12


@dataclass(frozen=True)
class NotesSentence:
    """A sentence of the notes, the section it sits in, and whether it makes a claim."""

    section: str
    topic: str
    text: str
    claim: bool


def normalise(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _is_heading(line: str) -> bool:
    stripped = line.strip()
    if _MD_HEADING.match(line):
        return True
    return (
        0 < len(stripped) <= 60
        and not _BULLET.match(line)
        and stripped[-1] not in ".!?:;,"
        and len(stripped.split()) <= 6
    )


def _blocks(text: str) -> Iterable[tuple[str, str]]:
    """(section heading, block text) for every bullet and paragraph, in order."""
    section, current = "", list[str]()
    for line in [*text.splitlines(), ""]:
        if not line.strip() or _BULLET.match(line) or _is_heading(line):
            if current:
                yield section, " ".join(current)
                current = []
            if line.strip() and _is_heading(line) and not _BULLET.match(line):
                section = _MD_HEADING.sub("", line).strip()
                continue
        if line.strip():
            current.append(_BULLET.sub("", line).strip())
    if current:
        yield section, " ".join(current)


def sentences(text: str) -> list[NotesSentence]:
    """Every sentence of the notes, marked claim or commentary by its section."""
    found = []
    for section, block in _blocks(text):
        topic = block.split(":", 1)[0].strip() if ":" in block[:60] else section
        commentary = section.strip().lower() in COMMENTARY_HEADINGS
        for piece in _SENTENCE_END.split(normalise(block)):
            if piece.strip():
                found.append(NotesSentence(section, topic, piece.strip(), not commentary))
    return found


def quote_fragments(probe: Probe) -> list[str]:
    """The pieces of the notes a probe quotes (its ``release_claim``, split at '...')."""
    pieces = (normalise(p).strip(" .") for p in probe.release_claim.split("..."))
    return [p for p in pieces if len(p) >= _MIN_FRAGMENT]


def match_probes(sentence: str, probes: Iterable[Probe]) -> tuple[str, ...]:
    text = normalise(sentence)
    return tuple(
        probe.id for probe in probes if any(frag in text for frag in quote_fragments(probe))
    )


def draft_pack(notes_path: Path, release: str, probes: Iterable[Probe]) -> Pack:
    """A draft pack for ``release`` from the notes file, claims matched to ``probes``."""
    candidates = list(probes)
    claims: list[PackClaim] = []
    for sentence in sentences(notes_path.read_text(encoding="utf-8")):
        if not sentence.claim:
            continue
        matched = match_probes(sentence.text, candidates)
        claims.append(
            PackClaim(
                id=f"{release}-{len(claims) + 1:02d}",
                quote=sentence.text,
                topic=sentence.topic,
                # A release's claims are news: the baseline should not show them yet.
                baseline_expected="absent",
                probes=matched,
            )
        )
    return Pack(
        name=f"pytorch-{release}",
        release=release,
        title=f"PyTorch {release} (draft from {notes_path.name})",
        module="",
        claims=tuple(claims),
        notes_file=notes_path.name,
        notes_sha256=sha256_of(notes_path),
    )
