"""SQLite implementation of the store. Every write is its own transaction, committed at
once, so a run killed mid-way keeps everything that had finished."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from torchcanary.errors import StoreError
from torchcanary.results import Manifest, Outcome, ProbeResult
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult
from torchcanary.store.schema import MIGRATIONS, SCHEMA_VERSION, TABLE_COLUMNS

_SQLITE_HEADER = b"SQLite format 3\x00"
_STORE_FIX = "pass --store with a new file or an existing torchcanary store"


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


class Store:
    """The results database at ``path``, created and migrated on open.

    Opening refuses (StoreError, a usage error) a path that cannot be created, a file that
    is not SQLite, another program's database and a newer store, and leaves each untouched.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        _refuse_foreign_file(self.path)
        _make_parent(self.path)
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}; {_STORE_FIX}") from None
        try:
            self._migrate()  # first: a store we refuse must be left byte-for-byte as it was
            self._db.execute("PRAGMA journal_mode=WAL")
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    # runs -------------------------------------------------------------------------------
    def create_run(self, plan: dict[str, Any]) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self._db.execute(
            "INSERT INTO runs (run_id, created_at, status, plan_json) VALUES (?, ?, 'running', ?)",
            (run_id, time.time(), json.dumps(plan)),
        )
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        self._db.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))

    def finish_run(self, run_id: str, decision: str, detail: dict[str, Any]) -> None:
        self._db.execute(
            "UPDATE runs SET status='finished', finished_at=?, decision=?, "
            "decision_json=? WHERE run_id=?",
            (time.time(), decision, json.dumps(detail), run_id),
        )

    def run(self, run_id: str) -> RunRow:
        row = self._db.execute(
            "SELECT run_id, created_at, finished_at, status, plan_json, "
            "decision, decision_json FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}; `torchcanary runs` lists them")
        return RunRow(
            row[0],
            row[1],
            row[2],
            row[3],
            json.loads(row[4]),
            row[5],
            json.loads(row[6]) if row[6] else None,
        )

    def runs(self) -> list[RunRow]:
        ids = [r[0] for r in self._db.execute("SELECT run_id FROM runs ORDER BY created_at")]
        return [self.run(run_id) for run_id in ids]

    def latest_run(self, status: str | None = None) -> RunRow | None:
        query = "SELECT run_id FROM runs"
        args: tuple[str, ...] = ()
        if status:
            query += " WHERE status = ?"
            args = (status,)
        row = self._db.execute(query + " ORDER BY created_at DESC LIMIT 1", args).fetchone()
        return self.run(row[0]) if row else None

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
        self._db.execute(
            "INSERT OR REPLACE INTO environments VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
        rows = self._db.execute(
            "SELECT role, spec, python, torch_version, build_seconds, "
            "reused, manifest_json FROM environments WHERE run_id = ?",
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
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO probe_results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
                    "INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?)",
                    (result.run_id, result.env_role, result.probe_id, series, json.dumps(values)),
                )
            self._db.execute("COMMIT")
        except Exception:
            self._db.execute("ROLLBACK")
            raise

    def probe_results(self, run_id: str) -> list[ProbeResult]:
        rows = self._db.execute(
            "SELECT env_role, probe_id, verdict, summary, evidence_json, duration_s, started_at "
            "FROM probe_results WHERE run_id = ? ORDER BY probe_id, env_role",
            (run_id,),
        )
        results = []
        for role, probe_id, verdict, summary, evidence, duration, started in rows.fetchall():
            measurements = {
                series: json.loads(values)
                for series, values in self._db.execute(
                    "SELECT series, values_json FROM measurements WHERE run_id=? AND "
                    "env_role=? AND source=?",
                    (run_id, role, probe_id),
                )
            }
            outcome = Outcome.from_json(
                {
                    "verdict": verdict,
                    "summary": summary,
                    "evidence": json.loads(evidence),
                    "measurements": measurements,
                }
            )
            results.append(ProbeResult(run_id, role, probe_id, outcome, duration, started))
        return results

    def done_probe_keys(self, run_id: str) -> set[tuple[str, str]]:
        return set(
            self._db.execute(
                "SELECT env_role, probe_id FROM probe_results WHERE run_id = ?", (run_id,)
            ).fetchall()
        )

    # measurements and artifacts ---------------------------------------------------------
    def save_measurement(
        self, run_id: str, env_role: str, source: str, series: str, values: list[float]
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO measurements VALUES (?, ?, ?, ?, ?)",
            (run_id, env_role, source, series, json.dumps(values)),
        )

    def measurements(self, run_id: str, source: str) -> dict[tuple[str, str], list[float]]:
        rows = self._db.execute(
            "SELECT env_role, series, values_json FROM measurements "
            "WHERE run_id = ? AND source = ?",
            (run_id, source),
        )
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}

    def save_artifact(self, run_id: str, name: str, media_type: str, content: bytes) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?)",
            (run_id, name, media_type, content),
        )

    def artifacts(self, run_id: str) -> Iterator[tuple[str, str, bytes]]:
        yield from self._db.execute(
            "SELECT name, media_type, content FROM artifacts WHERE run_id = ? ORDER BY name",
            (run_id,),
        )

    # other pillars ----------------------------------------------------------------------
    def save_section_result(self, run_id: str, result: SectionResult) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO section_results VALUES (?, ?, ?, ?, ?, ?, ?)",
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
        rows = self._db.execute(
            "SELECT section, key, env_role, verdict, payload_json FROM section_results "
            "WHERE run_id = ? AND section = ? ORDER BY key, env_role",
            (run_id, section),
        )
        return [SectionResult(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def done_section_keys(self, run_id: str, section: str) -> set[tuple[str, str]]:
        return set(
            self._db.execute(
                "SELECT key, env_role FROM section_results WHERE run_id = ? AND section = ?",
                (run_id, section),
            )
        )

    # raw rows: history, compare and copy ------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query written with ``?`` placeholders."""
        return self._db.execute(sql, tuple(params)).fetchall()

    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (all of ``table``'s columns, in order) as they are, in one transaction."""
        marks = ", ".join("?" * len(TABLE_COLUMNS[table]))
        values = [tuple(row) for row in rows]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", values)
            self._db.execute("COMMIT")
        except Exception:
            self._db.execute("ROLLBACK")
            raise
        return len(values)
