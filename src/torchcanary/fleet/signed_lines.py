"""Lines that prove who wrote them, and files only their owner reads: the shared folder's rules.

A Slurm run's units, their result lines and their job logs live in a folder every node
sees; anyone who can write there could otherwise forge a result (which the driver would
commit) or edit a unit (which would run in the user's job). So each dispatch has a key
(``KEY_FILE``, mode 0600, like the host sockets' key), every unit file and every result
line is ``HMAC-SHA256(key, text) text``, and a line or file whose MAC does not match is
refused. Folders are 0700 and files 0600. Standard library only: the node side uses it too.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "key"
PRIVATE_UMASK = 0o077  # folders 0700, files 0600


class Refused(Exception):
    """A unit file or result line whose MAC does not match its dispatch's key."""


def new_key(folder: Path) -> bytes:
    """A fresh key for the dispatch in ``folder``, written there for its jobs (0600)."""
    key = secrets.token_bytes(32)
    write_private(folder / KEY_FILE, key.hex())
    return key


def read_key(folder: Path) -> bytes:
    return bytes.fromhex((folder / KEY_FILE).read_text(encoding="utf-8").strip())


def write_private(path: Path, text: str) -> None:
    """``text`` into a new file only its owner may read or write (0600)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def sign(key: bytes, text: str) -> str:
    """``text`` (one line) as ``MAC text``."""
    return f"{_mac(key, text)} {text}"


def verify(key: bytes, line: str) -> str:
    """The text of a signed line; Refused when its MAC is missing or does not match."""
    mac, _, text = line.partition(" ")
    if not hmac.compare_digest(mac, _mac(key, text)):
        raise Refused("its MAC does not match the dispatch's key (forged or edited)")
    return text


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()
