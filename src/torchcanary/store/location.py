"""Where a store is: a SQLite file path or a ``postgresql://`` URL, and how to print it.

A URL may carry a password (``postgresql://user:secret@host/db`` or ``?password=...``);
``redact`` is the one place that removes it, and every message, report and log line that
names a store goes through ``ResultStore.location`` or ``redact``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from torchcanary.errors import StoreError
from torchcanary.store.base import ResultStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
HIDDEN = "***"


def is_postgres_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.lower().startswith(POSTGRES_SCHEMES)


def url_password(url: str) -> str | None:
    """The password a URL carries, in its user part or its query, if any."""
    parts = urlsplit(url)
    if parts.password:
        return parts.password
    return dict(parse_qsl(parts.query)).get("password")


def redact(text: str) -> str:
    """``text`` with the password of any store URL in it replaced by ``***``."""
    return re.sub(r"postgres(?:ql)?://[^\s'\"]+", lambda m: _redact_url(m.group(0)), text)


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{HIDDEN}@{hostport}"
    query = urlencode(
        [(k, HIDDEN if k == "password" else v) for k, v in parse_qsl(parts.query)], safe="*"
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(message: str, url: str) -> str:
    """A driver's error message as one line, with no trace of the URL's password."""
    password = url_password(url)
    if password:
        message = message.replace(password, HIDDEN)
    return " ".join(redact(message).split())


def open_store(location: str | Path, *, create: bool = True) -> ResultStore:
    """The store at ``location``: PostgreSQL for a ``postgresql://`` URL, else a SQLite file.

    With ``create=False`` (the reading commands) a store that does not exist yet is a
    ``StoreError``, not an empty store made as a side effect.
    """
    if is_postgres_url(location):
        from torchcanary.store.postgres import PostgresStore

        return PostgresStore(str(location), create=create)
    from torchcanary.store.sqlite import Store

    path = Path(location)
    if not create and not path.is_file():
        raise StoreError(f"no store at {path}; pass --store PATH or a postgresql:// URL")
    return Store(path)
