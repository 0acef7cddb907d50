"""SQLite implementation of the store. Every write is its own transaction, committed at
once, so a run killed mid-way keeps everything that had finished.

The reads and writes themselves are shared with PostgreSQL (``store/sql_common.py``); this
file holds opening, migrating and how SQLite runs a statement or a transaction."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from torchcanary.errors import StoreError
from torchcanary.store.schema import MIGRATIONS, SCHEMA_VERSION, TABLE_COLUMNS
from torchcanary.store.sql_common import SqlStore, Statement

_SQLITE_HEADER = b"SQLite format 3\x00"
_STORE_FIX = "pass --store with a new file or an existing torchcanary store"
_BUSY_TIMEOUT_S = 30.0  # how long a connection waits for another's lock


def _refuse_foreign_file(path: Path) -> None:
    """A file that is not SQLite is refused before SQLite touches it (it would write a
    journal or, on first write, a schema into someone else's file)."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a store; pass --store {path}/canary.db")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there yet: _make_parent says why it cannot be created, if so
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc.strerror}; {_STORE_FIX}") from None
    if header and header != _SQLITE_HEADER:  # an empty file is an empty database
        raise StoreError(f"{path} is not a torchcanary store (not SQLite); {_STORE_FIX}")


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise StoreError(
            f"cannot create the store {path}: {why}; pass --store with a path in a "
            "directory you can write"
        ) from None


def _write_ahead_logging(db: sqlite3.Connection, timeout_s: float) -> None:
    """Put the store in WAL mode, retrying while another connection is in the way.

    Switching a new store to WAL needs its file to itself. When several runs open the same
    new store at once, one holds a read lock while it asks for that, another holds the
    write lock of its migration, and SQLite answers "database is locked" at once instead
    of waiting its busy timeout (waiting could deadlock). Once any of them has switched,
    the mode is in the file and the others' switch is a no-op.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.01, 0.1))  # apart, so they do not collide again


class SqliteStore(SqlStore):
    """The results database at ``path``, created and migrated on open.

    Opening refuses (StoreError, a usage error) a path that cannot be created, a file that
    is not SQLite, another program's database and a newer store, and leaves each untouched.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        _refuse_foreign_file(self.path)
        _make_parent(self.path)
        try:
            self._db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}; {_STORE_FIX}") from None
        try:
            self._migrate()  # first: a store we refuse must be left byte-for-byte as it was
            _write_ahead_logging(self._db, _BUSY_TIMEOUT_S)
            self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(f"cannot use the store {self.path}: {exc}; {_STORE_FIX}") from None
        except BaseException:
            self._db.close()
            raise

    @property
    def location(self) -> str:
        """Where the store is, fit to print."""
        return str(self.path)

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master")}
        if tables and "runs" not in tables:
            raise StoreError(
                f"{self.path} is an SQLite database but not a torchcanary store "
                f"(it has no runs table); {_STORE_FIX}"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this "
                f"torchcanary understands ({SCHEMA_VERSION}); upgrade torchcanary"
            )
        for number in range(version, SCHEMA_VERSION):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if self._db.execute("PRAGMA user_version").fetchone()[0] > number:
                    self._db.execute("COMMIT")  # another run opening it migrated this step
                    continue
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number + 1}")
                self._db.execute("COMMIT")
            except Exception:
                self._db.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # what the shared reads and writes need ------------------------------------------------
    def _execute(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, tuple(params)).fetchall()

    def _write_together(self, doing: str, statements: Sequence[Statement]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                self._db.execute(sql, params)
            self._db.execute("COMMIT")
        except Exception:
            self._db.execute("ROLLBACK")
            raise

    def _upsert(self, table: str) -> str:
        marks = ", ".join("?" * len(TABLE_COLUMNS[table]))
        return f"INSERT OR REPLACE INTO {table} VALUES ({marks})"

    # raw rows: history, compare and copy ------------------------------------------------
    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (all of ``table``'s columns, in order) as they are, in one transaction."""
        values = [tuple(row) for row in rows]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(self._upsert(table), values)
            self._db.execute("COMMIT")
        except Exception:
            self._db.execute("ROLLBACK")
            raise
        return len(values)
