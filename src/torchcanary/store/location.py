"""Where a store is: a SQLite file path or a PostgreSQL URL, and how to print it.

Users paste URLs from SQLAlchemy, so ``postgresql+psycopg://``, ``postgresql+psycopg2://``
and ``postgres://`` all mean the same PostgreSQL store (we always connect with psycopg), and
``sqlite:///PATH`` means the file at PATH. Any other ``SCHEME://`` is refused in one line
rather than taken for a file path (which would make a folder named after the URL).

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

HIDDEN = "***"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = re.compile(r"^postgres(?:ql)?(?:\+[A-Za-z0-9_]+)?$", re.IGNORECASE)
_SQLITE = re.compile(r"^sqlite(?:\+[A-Za-z0-9_]+)?$", re.IGNORECASE)
_ANY_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def _scheme(location: str | Path) -> str | None:
    found = _SCHEME.match(location) if isinstance(location, str) else None
    return found.group(1) if found else None


def is_postgres_url(location: str | Path) -> bool:
    """A PostgreSQL URL, in any spelling SQLAlchemy or libpq users write one."""
    scheme = _scheme(location)
    return scheme is not None and _POSTGRES.match(scheme) is not None


def store_location(text: str | Path, cwd: Path) -> Path | str:
    """``text`` as a store: a ``postgresql://`` URL psycopg accepts, or a file path.

    A relative path is relative to ``cwd``. An unknown ``SCHEME://`` is a ``StoreError``
    naming the forms understood, with any password in it hidden.
    """
    scheme = _scheme(text)
    if scheme is None:
        return (cwd / text).expanduser()
    url = str(text)
    if _POSTGRES.match(scheme):
        return "postgresql" + url[len(scheme) :]
    if _SQLITE.match(scheme):
        path = url[len(scheme) + len("://") :]
        if not path.startswith("/"):  # sqlite:///rel.db -> "/rel.db" below
            raise StoreError(f"{redact(url)}: write a SQLite URL as sqlite:///PATH")
        return (cwd / path[1:]).expanduser()
    raise StoreError(
        f"unknown store scheme {scheme!r} in {redact(url)}; pass a SQLite file path, "
        "sqlite:///PATH or postgresql://USER@HOST/DB"
    )


def url_password(url: str) -> str | None:
    """The password a URL carries, in its user part or its query, if any."""
    parts = urlsplit(url)
    if parts.password:
        return parts.password
    return dict(parse_qsl(parts.query)).get("password")


def redact(text: str) -> str:
    """``text`` with the password of any URL in it (a store's or not) replaced by ``***``."""
    return _ANY_URL.sub(lambda m: _redact_url(m.group(0)), text)


def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (e.g. a bad port): hide all of its user part
        head, at, tail = url.rpartition("@")
        return f"{head.split('://', 1)[0]}://{HIDDEN}@{tail}" if at else url
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{HIDDEN}@{hostport}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(key == "password" for key, _ in pairs):
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    query = urlencode([(k, HIDDEN if k == "password" else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(message: str, url: str) -> str:
    """A driver's error message as one line, with no trace of the URL's password."""
    password = url_password(url)
    if password:
        message = message.replace(password, HIDDEN)
    return " ".join(redact(message).split())


def open_store(location: str | Path, *, create: bool = True) -> ResultStore:
    """The store at ``location``: PostgreSQL for a PostgreSQL URL, else a SQLite file.

    With ``create=False`` (the reading commands) a store that does not exist yet is a
    ``StoreError``, not an empty store made as a side effect.
    """
    where = store_location(location, Path.cwd()) if isinstance(location, str) else location
    if isinstance(where, str):
        from torchcanary.store.postgres import PostgresStore

        return PostgresStore(where, create=create)
    from torchcanary.store.sqlite import Store

    if not create and not where.is_file():
        raise StoreError(f"no store at {where}; pass --store PATH or a postgresql:// URL")
    return Store(where)
