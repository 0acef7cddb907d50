"""Where a store is: a SQLite file path or a PostgreSQL URL, and how to print it.

Users paste URLs from SQLAlchemy, so ``postgresql+psycopg://``, ``postgresql+psycopg2://``
and ``postgres://`` all mean the same PostgreSQL store (we always connect with psycopg), and
``sqlite:///PATH`` means the file at PATH. Any other ``SCHEME://`` is refused in one line
rather than taken for a file path (which would make a folder named after the URL).

A URL may carry a password: ``store/redaction.py`` hides it in every message.
"""

from __future__ import annotations

import re
from pathlib import Path

from torchcanary.errors import StoreError
from torchcanary.store.base import ResultStore
from torchcanary.store.redaction import redact

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = re.compile(r"^postgres(?:ql)?(?:\+[A-Za-z0-9_]+)?$", re.IGNORECASE)
_SQLITE = re.compile(r"^sqlite(?:\+[A-Za-z0-9_]+)?$", re.IGNORECASE)


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


def open_store(location: str | Path, *, create: bool = True) -> ResultStore:
    """The store at ``location``: PostgreSQL for a PostgreSQL URL, else a SQLite file.

    With ``create=False`` (the reading commands) a store that does not exist yet is a
    ``StoreError``, not an empty store made as a side effect.
    """
    where = store_location(location, Path.cwd()) if isinstance(location, str) else location
    if isinstance(where, str):
        from torchcanary.store.postgres import PostgresStore

        return PostgresStore(where, create=create)
    from torchcanary.store.sqlite import SqliteStore

    if not create and not where.is_file():
        raise StoreError(f"no store at {where}; pass --store PATH or a postgresql:// URL")
    return SqliteStore(where)
