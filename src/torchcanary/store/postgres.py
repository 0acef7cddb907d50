"""PostgreSQL implementation of the store, for a team sharing one store across machines.

Same schema and migrations as SQLite (``store/schema.py``), with SQLite's column types
mapped to PostgreSQL's. Every write commits at once (autocommit; a probe result and its
measurements in one transaction), so many runs can write concurrently and a run killed or
cut off keeps everything it had committed. Migrations take an advisory lock, so several
runs opening a new store at once bring it forward exactly once.

Any driver error becomes a ``StoreError`` of one line naming the store without its password.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torchcanary.errors import StoreError
from torchcanary.results import Manifest, Outcome, ProbeResult
from torchcanary.store.location import redact, scrub
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult
from torchcanary.store.schema import MIGRATIONS, PRIMARY_KEYS, SCHEMA_VERSION, TABLE_COLUMNS

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


def _upsert(table: str) -> str:
    """SQLite's ``INSERT OR REPLACE`` for ``table``."""
    columns = TABLE_COLUMNS[table]
    keys = PRIMARY_KEYS[table]
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in keys)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


class PostgresStore:
    """The results database at ``url`` (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "a postgresql:// store needs psycopg: pip install 'torchcanary[postgres]'"
            ) from None
        self._psycopg = psycopg
        self._url = url
        self.location = redact(url)
        self._lost: StoreError | None = None
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

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Driver errors as one ``StoreError`` line; the connection lost says what is kept."""
        if self._lost is not None:
            raise self._lost  # later writes (the run's status) repeat the first, true cause
        try:
            yield
        except self._psycopg.OperationalError as exc:
            lost = StoreError(
                f"lost the store at {self.location} while trying to {doing}: "
                f"{scrub(str(exc), self._url)}; everything committed before is kept: once "
                "the server is back, carry on with `torchcanary run --resume`"
            )
            if self._db.broken or self._db.closed:
                self._lost = lost
            raise lost from None
        except self._psycopg.Error as exc:
            raise StoreError(
                f"the store at {self.location} refused to {doing}: {scrub(str(exc), self._url)}"
            ) from None

    def _execute(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard(doing):
            cursor = self._db.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

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
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query written with SQLite's ``?`` placeholders."""
        return self._execute("read", postgres_query(sql), params)

    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (all of ``table``'s columns, in order) as they are, in one transaction."""
        values = [tuple(row) for row in rows]
        with self._guard(f"copy into {table}"), self._db.transaction(), self._db.cursor() as cur:
            cur.executemany(_upsert(table), values)
        return len(values)

    # runs -------------------------------------------------------------------------------
    def create_run(self, plan: dict[str, Any]) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self._execute(
            "create a run",
            "INSERT INTO runs (run_id, created_at, status, plan_json) "
            "VALUES (%s, %s, 'running', %s)",
            (run_id, time.time(), json.dumps(plan)),
        )
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        self._execute(
            "record the run's status",
            "UPDATE runs SET status = %s WHERE run_id = %s",
            (status, run_id),
        )

    def finish_run(self, run_id: str, decision: str, detail: dict[str, Any]) -> None:
        self._execute(
            "finish the run",
            "UPDATE runs SET status='finished', finished_at=%s, decision=%s, "
            "decision_json=%s WHERE run_id=%s",
            (time.time(), decision, json.dumps(detail), run_id),
        )

    _RUN_COLUMNS = (
        "SELECT run_id, created_at, finished_at, status, plan_json, decision, decision_json "
        "FROM runs"
    )

    @staticmethod
    def _run_row(row: Sequence[Any]) -> RunRow:
        return RunRow(
            row[0],
            row[1],
            row[2],
            row[3],
            json.loads(row[4]),
            row[5],
            json.loads(row[6]) if row[6] else None,
        )

    def run(self, run_id: str) -> RunRow:
        rows = self._execute("read a run", self._RUN_COLUMNS + " WHERE run_id = %s", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.location}; `torchcanary runs` lists them")
        return self._run_row(rows[0])

    def runs(self) -> list[RunRow]:
        rows = self._execute("list runs", self._RUN_COLUMNS + " ORDER BY created_at")
        return [self._run_row(row) for row in rows]

    def latest_run(self, status: str | None = None) -> RunRow | None:
        where, args = (" WHERE status = %s", (status,)) if status else ("", ())
        rows = self._execute(
            "find the latest run",
            self._RUN_COLUMNS + where + " ORDER BY created_at DESC LIMIT 1",
            args,
        )
        return self._run_row(rows[0]) if rows else None

    # environments -----------------------------------------------------------------------
    def save_environment(
        self,
        run_id: str,
        role: str,
        spec: str,
        python: str,
        torch_version: str,
        build_seconds: float,
        reused: bool,
        manifest: Manifest,
    ) -> None:
        self._execute(
            "save an environment",
            _upsert("environments"),
            (
                run_id,
                role,
                spec,
                python,
                torch_version,
                build_seconds,
                int(reused),
                json.dumps(manifest.to_json()),
            ),
        )

    def environments(self, run_id: str) -> dict[str, EnvironmentRow]:
        rows = self._execute(
            "read environments",
            "SELECT role, spec, python, torch_version, build_seconds, "
            "reused, manifest_json FROM environments WHERE run_id = %s",
            (run_id,),
        )
        return {
            r[0]: EnvironmentRow(
                r[0], r[1], r[2], r[3], r[4], bool(r[5]), Manifest.from_json(json.loads(r[6]))
            )
            for r in rows
        }

    # probe results ----------------------------------------------------------------------
    def save_probe_result(self, result: ProbeResult) -> None:
        outcome = result.outcome
        with self._guard("save a probe result"), self._db.transaction():
            self._db.execute(
                _upsert("probe_results"),
                (
                    result.run_id,
                    result.env_role,
                    result.probe_id,
                    outcome.verdict.value,
                    outcome.summary,
                    json.dumps(outcome.evidence, default=str),
                    result.duration_s,
                    result.started_at,
                ),
            )
            for series, values in outcome.measurements.items():
                self._db.execute(
                    _upsert("measurements"),
                    (result.run_id, result.env_role, result.probe_id, series, json.dumps(values)),
                )

    def probe_results(self, run_id: str) -> list[ProbeResult]:
        rows = self._execute(
            "read probe results",
            "SELECT env_role, probe_id, verdict, summary, evidence_json, duration_s, started_at "
            "FROM probe_results WHERE run_id = %s "
            'ORDER BY probe_id COLLATE "C", env_role COLLATE "C"',
            (run_id,),
        )
        series_rows = self._execute(
            "read measurements",
            "SELECT env_role, source, series, values_json FROM measurements WHERE run_id = %s",
            (run_id,),
        )
        by_source: dict[tuple[str, str], dict[str, Any]] = {}
        for role, source, series, values in series_rows:
            by_source.setdefault((role, source), {})[series] = json.loads(values)
        results = []
        for role, probe_id, verdict, summary, evidence, duration, started in rows:
            outcome = Outcome.from_json(
                {
                    "verdict": verdict,
                    "summary": summary,
                    "evidence": json.loads(evidence),
                    "measurements": by_source.get((role, probe_id), {}),
                }
            )
            results.append(ProbeResult(run_id, role, probe_id, outcome, duration, started))
        return results

    def done_probe_keys(self, run_id: str) -> set[tuple[str, str]]:
        rows = self._execute(
            "read finished probes",
            "SELECT env_role, probe_id FROM probe_results WHERE run_id = %s",
            (run_id,),
        )
        return {(r[0], r[1]) for r in rows}

    # measurements and artifacts ---------------------------------------------------------
    def save_measurement(
        self, run_id: str, env_role: str, source: str, series: str, values: list[float]
    ) -> None:
        self._execute(
            "save a measurement",
            _upsert("measurements"),
            (run_id, env_role, source, series, json.dumps(values)),
        )

    def measurements(self, run_id: str, source: str) -> dict[tuple[str, str], list[float]]:
        rows = self._execute(
            "read measurements",
            "SELECT env_role, series, values_json FROM measurements "
            "WHERE run_id = %s AND source = %s",
            (run_id, source),
        )
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}

    def save_artifact(self, run_id: str, name: str, media_type: str, content: bytes) -> None:
        self._execute("save an artifact", _upsert("artifacts"), (run_id, name, media_type, content))

    def artifacts(self, run_id: str) -> Iterator[tuple[str, str, bytes]]:
        rows = self._execute(
            "read artifacts",
            "SELECT name, media_type, content FROM artifacts WHERE run_id = %s "
            'ORDER BY name COLLATE "C"',
            (run_id,),
        )
        for name, media_type, content in rows:
            yield name, media_type, bytes(content)

    # other pillars ----------------------------------------------------------------------
    def save_section_result(self, run_id: str, result: SectionResult) -> None:
        self._execute(
            f"save a {result.section} result",
            _upsert("section_results"),
            (
                run_id,
                result.section,
                result.key,
                result.env_role,
                result.verdict,
                json.dumps(result.payload, default=str),
                time.time(),
            ),
        )

    def section_results(self, run_id: str, section: str) -> list[SectionResult]:
        rows = self._execute(
            f"read {section} results",
            "SELECT section, key, env_role, verdict, payload_json FROM section_results "
            "WHERE run_id = %s AND section = %s "
            'ORDER BY key COLLATE "C", env_role COLLATE "C"',
            (run_id, section),
        )
        return [SectionResult(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def done_section_keys(self, run_id: str, section: str) -> set[tuple[str, str]]:
        rows = self._execute(
            f"read finished {section} units",
            "SELECT key, env_role FROM section_results WHERE run_id = %s AND section = %s",
            (run_id, section),
        )
        return {(r[0], r[1]) for r in rows}
