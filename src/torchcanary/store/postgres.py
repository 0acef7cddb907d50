"""PostgreSQL implementation of the store, for a team sharing one store across machines.

Same schema and migrations as SQLite (``store/schema.py``), with SQLite's column types
mapped to PostgreSQL's. Every write commits at once (autocommit; a probe result and its
measurements in one transaction), so many runs can write concurrently and a run killed or
cut off keeps everything it had committed. Migrations take an advisory lock, so several
runs opening a new store at once bring it forward exactly once.

The reads and writes themselves are shared with SQLite (``store/sql_common.py``); this file
holds connecting, migrating, error translation and PostgreSQL's spelling of an upsert.

Any driver error becomes a ``StoreError`` of one line naming the store without its password;
the server lost mid-run is a ``StoreLostError`` (exit 3) that says which run and how many of
its results this process had stored before the loss: those are kept, for ``--resume``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torchcanary.errors import StoreError, StoreLostError
from torchcanary.store.redaction import redact, scrub
from torchcanary.store.rows import SectionResult
from torchcanary.store.schema import MIGRATIONS, PRIMARY_KEYS, SCHEMA_VERSION, TABLE_COLUMNS
from torchcanary.store.sql_common import SqlStore, Statement

VERSION_TABLE = "torchcanary_schema"
"""One row, one column: the schema version (SQLite keeps it in ``PRAGMA user_version``)."""

_MIGRATION_LOCK = 0x746F7263  # an arbitrary advisory-lock key, the same for every run

# SQLite's REAL is PostgreSQL's 4-byte float; timestamps need the 8-byte one.
_TYPE_MAP = {"REAL": "DOUBLE PRECISION", "BLOB": "BYTEA"}


def postgres_schema(statement: str) -> str:
    """A migration written for SQLite, with PostgreSQL's column types."""
    for sqlite_type, pg_type in _TYPE_MAP.items():
        statement = re.sub(rf"\b{sqlite_type}\b", pg_type, statement)
    return statement


def postgres_query(sql: str) -> str:
    """A query written with SQLite's ``?`` placeholders, with psycopg's."""
    return sql.replace("%", "%%").replace("?", "%s")


@dataclass
class _Written:
    """What this process has written: a lost server's message says what is kept."""

    run_id: str | None = None
    results: int = 0


class PostgresStore(SqlStore):
    """The results database at ``url`` (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``)."""

    _BYTE_ORDER = ' COLLATE "C"'  # text ordered as SQLite orders it, whatever the locale

    def __init__(self, url: str, *, create: bool = True) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "a postgresql:// store needs psycopg: pip install 'torchcanary[postgres]'"
            ) from None
        self._psycopg = psycopg
        self._url = url
        self._location = redact(url)
        self._lost: StoreLostError | None = None
        self._written = _Written()  # shared with ``scoped`` views: they write the same run
        try:
            self._db = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the store at {self.location}: {scrub(str(exc), url)}; check "
                "the host, port, database, user and password (PGPASSWORD or ~/.pgpass work)"
            ) from None
        try:
            with self._guard("open"):
                self._migrate(create)
        except BaseException:
            self._db.close()
            raise

    @property
    def location(self) -> str:
        """Where the store is, fit to print: the URL without its password."""
        return self._location

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Driver errors as one ``StoreError`` line; the connection lost says what is kept."""
        if self._lost is not None:
            raise self._lost  # later writes (the run's status) repeat the first, true cause
        try:
            yield
        except self._psycopg.OperationalError as exc:
            lost = StoreLostError(
                f"lost the store at {self.location} while trying to {doing}: "
                f"{scrub(str(exc), self._url)}; {self._what_is_kept()}"
            )
            if self._db.broken or self._db.closed:
                self._lost = lost
            raise lost from None
        except self._psycopg.Error as exc:
            raise StoreError(
                f"the store at {self.location} refused to {doing}: {scrub(str(exc), self._url)}"
            ) from None

    def _what_is_kept(self) -> str:
        run_id, saved = self._written.run_id, self._written.results
        if run_id is None:
            return "everything committed before is kept"
        return (
            f"kept: run {run_id} with the {saved} results this process stored before the "
            "loss (and all committed earlier); once the server is back, carry on with "
            f"`torchcanary run --resume {run_id}`"
        )

    # the writes that say what a lost server leaves kept ---------------------------------
    def create_run(self, plan: dict[str, Any]) -> str:
        self._written.run_id = super().create_run(plan)
        return self._written.run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        self._written.run_id = run_id  # a resumed run is named by its first status write
        super().set_run_status(run_id, status)

    def save_rows(self, doing: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        super().save_rows(doing, rows)  # one result (the claims': a probe result)
        self._written.results += 1

    def save_section_result(self, run_id: str, result: SectionResult) -> None:
        super().save_section_result(run_id, result)
        self._written.results += 1

    # what the shared reads and writes need ------------------------------------------------
    def _execute(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard(doing):
            cursor = self._db.execute(postgres_query(sql), params)
            return cursor.fetchall() if cursor.description else []

    def _write_together(self, doing: str, statements: Sequence[Statement]) -> None:
        with self._guard(doing), self._db.transaction():
            for sql, params in statements:
                self._db.execute(postgres_query(sql), params)

    def _upsert(self, table: str) -> str:
        """SQLite's ``INSERT OR REPLACE`` for ``table``."""
        columns = TABLE_COLUMNS[table]
        keys = PRIMARY_KEYS[table]
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in keys)
        marks = ", ".join(["?"] * len(columns))
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
        )

    # schema ---------------------------------------------------------------------------
    def _read_version(self) -> int:
        exists = self._db.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()
        if exists is None or exists[0] is None:
            return 0
        row = self._db.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self, create: bool) -> None:
        # Read first, outside any lock or transaction: a store we refuse is left untouched.
        version = self._read_version()
        self._refuse_newer(version)
        if version == 0 and not create:
            raise StoreError(
                f"no torchcanary store at {self.location} yet; a run creates it, or "
                "`torchcanary store migrate --store URL`"
            )
        if version == SCHEMA_VERSION:
            return
        # A session lock taken before the transaction starts, so that everything the
        # transaction reads comes after any other run's migration has committed.
        self._db.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            with self._db.transaction():
                version = self._read_version()  # another run may have migrated meanwhile
                self._refuse_newer(version)
                if version == 0:
                    self._db.execute(f"CREATE TABLE {VERSION_TABLE} (version INTEGER NOT NULL)")
                    self._db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (0)")
                for number in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[number].split(";"):
                        if statement.strip():
                            self._db.execute(postgres_schema(statement))
                    self._db.execute(f"UPDATE {VERSION_TABLE} SET version = %s", (number + 1,))
        finally:
            self._db.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.location} has schema version {version}, newer than this "
                f"torchcanary understands ({SCHEMA_VERSION}); upgrade torchcanary"
            )

    @property
    def schema_version(self) -> int:
        with self._guard("read the schema version"):
            return self._read_version()

    # raw rows: history, compare and copy ------------------------------------------------
    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (all of ``table``'s columns, in order) as they are, in one transaction."""
        values = [tuple(row) for row in rows]
        with self._guard(f"copy into {table}"), self._db.transaction(), self._db.cursor() as cur:
            cur.executemany(postgres_query(self._upsert(table)), values)
        return len(values)
