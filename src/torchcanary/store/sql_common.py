"""What both store engines share: every read and write of the ``ResultStore`` protocol,
written once as SQL with SQLite's ``?`` placeholders, with the rows built and unpacked here.

An engine supplies only what is truly its own: how a statement runs (and how its errors
read), how several writes share one transaction, how ``INSERT OR REPLACE`` is spelled, and
how ``ORDER BY`` compares text byte by byte (SQLite does by default; PostgreSQL needs
``COLLATE "C"``), so both engines list rows in the same order.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from torchcanary.errors import StoreError
from torchcanary.results import Manifest
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult
from torchcanary.store.schema import TABLE_COLUMNS

Statement = tuple[str, tuple[Any, ...]]
"""One write: SQL with ``?`` placeholders and its parameters."""

_Store = TypeVar("_Store", bound="SqlStore")  # typing.Self needs Python 3.11

_RUN_COLUMNS = (
    "SELECT run_id, created_at, finished_at, status, plan_json, decision, decision_json FROM runs"
)


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


class SqlStore(ABC):
    """The ``ResultStore`` methods, on top of the few primitives an engine provides."""

    _BYTE_ORDER = ""
    """Appended to each text column in ``ORDER BY`` to compare it byte by byte."""

    _node = ""
    _profile = ""
    """The fleet node and hardware profile this store writes and reads results for; a run
    on one machine leaves both empty. ``scoped`` gives a store with them set."""

    @property
    def profile(self) -> str:
        return self._profile

    def scoped(self: _Store, node: str, profile: str) -> _Store:
        """This store, reading and writing the results of one fleet node and profile.

        It shares this store's connection: close this one, not the scoped one. Runs are
        not scoped; results, measurements, environments and artifacts are.
        """
        view = copy.copy(self)
        view._node, view._profile = node, profile
        return view

    def run_profiles(self, run_id: str) -> dict[str, str]:
        """Every fleet profile that stored a result in ``run_id``, with the node it ran on."""
        rows = self._execute(
            "read a run's profiles",
            "SELECT profile, node FROM environments WHERE run_id = ? AND profile != '' "
            "UNION SELECT profile, node FROM artifacts WHERE run_id = ? AND profile != '' "
            "UNION SELECT profile, node FROM section_results WHERE run_id = ? AND profile != '' "
            "UNION SELECT profile, node FROM probe_results WHERE run_id = ? AND profile != ''",
            (run_id, run_id, run_id, run_id),
        )
        return dict(sorted((profile, node) for profile, node in rows))

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, fit to print (never with a password)."""

    @abstractmethod
    def close(self) -> None:
        """Let go of the connection."""

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def _execute(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) and return its rows; ``doing`` names the
        step for an engine that reports errors in words."""

    @abstractmethod
    def _write_together(self, doing: str, statements: Sequence[Statement]) -> None:
        """Run ``statements`` in one transaction: all of them are kept, or none."""

    @abstractmethod
    def _upsert(self, table: str) -> str:
        """``INSERT OR REPLACE`` of all of ``table``'s columns, with ``?`` placeholders."""

    def _ordered(self, *columns: str) -> str:
        return " ORDER BY " + ", ".join(column + self._BYTE_ORDER for column in columns)

    # runs -------------------------------------------------------------------------------
    def create_run(self, plan: dict[str, Any]) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        self._execute(
            "create a run",
            "INSERT INTO runs (run_id, created_at, status, plan_json) VALUES (?, ?, 'running', ?)",
            (run_id, time.time(), json.dumps(plan)),
        )
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        self._execute(
            "record the run's status",
            "UPDATE runs SET status = ? WHERE run_id = ?",
            (status, run_id),
        )

    def finish_run(self, run_id: str, decision: str, detail: dict[str, Any]) -> None:
        self._execute(
            "finish the run",
            "UPDATE runs SET status='finished', finished_at=?, decision=?, "
            "decision_json=? WHERE run_id=?",
            (time.time(), decision, json.dumps(detail), run_id),
        )

    def run(self, run_id: str) -> RunRow:
        rows = self._execute("read a run", _RUN_COLUMNS + " WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.location}; `torchcanary runs` lists them")
        return _run_row(rows[0])

    def runs(self) -> list[RunRow]:
        rows = self._execute("list runs", _RUN_COLUMNS + " ORDER BY created_at")
        return [_run_row(row) for row in rows]

    def latest_run(self, status: str | None = None) -> RunRow | None:
        where, args = (" WHERE status = ?", (status,)) if status else ("", ())
        rows = self._execute(
            "find the latest run",
            _RUN_COLUMNS + where + " ORDER BY created_at DESC LIMIT 1",
            args,
        )
        return _run_row(rows[0]) if rows else None

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
            self._upsert("environments"),
            (
                run_id,
                role,
                spec,
                python,
                torch_version,
                build_seconds,
                int(reused),
                json.dumps(manifest.to_json()),
                self._node,
                self._profile,
            ),
        )

    def environments(self, run_id: str) -> dict[str, EnvironmentRow]:
        rows = self._execute(
            "read environments",
            "SELECT role, spec, python, torch_version, build_seconds, "
            "reused, manifest_json FROM environments WHERE run_id = ? AND profile = ?",
            (run_id, self._profile),
        )
        return {
            r[0]: EnvironmentRow(
                r[0], r[1], r[2], r[3], r[4], bool(r[5]), Manifest.from_json(json.loads(r[6]))
            )
            for r in rows
        }

    # a section's own table (its ``result_table``) ---------------------------------------
    def save_rows(self, doing: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Each ``(table, row)`` written (a row with the table's key replaces the one
        there), all of them or none; ``row`` names every column but node and profile,
        which are this store's."""
        statements: list[Statement] = []
        for table, row in rows:
            values = [row[c] for c in TABLE_COLUMNS[table] if c not in ("node", "profile")]
            statements.append((self._upsert(table), (*values, self._node, self._profile)))
        self._write_together(doing, statements)

    def rows(
        self, table: str, run_id: str, columns: Sequence[str], order_by: Sequence[str] = ()
    ) -> list[tuple[Any, ...]]:
        """``columns`` of ``table``'s rows of ``run_id`` in this store's profile."""
        known = TABLE_COLUMNS[table]
        unknown = [column for column in (*columns, *order_by) if column not in known]
        if unknown:
            raise ValueError(f"{table} has no column {', '.join(unknown)}")
        return self._execute(
            f"read {table}",
            f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = ? AND profile = ?"
            + (self._ordered(*order_by) if order_by else ""),
            (run_id, self._profile),
        )

    # measurements and artifacts ---------------------------------------------------------
    def save_measurement(
        self, run_id: str, env_role: str, source: str, series: str, values: list[float]
    ) -> None:
        self._execute(
            "save a measurement",
            self._upsert("measurements"),
            (run_id, env_role, source, series, json.dumps(values), self._node, self._profile),
        )

    def measurements(self, run_id: str, source: str) -> dict[tuple[str, str], list[float]]:
        rows = self._execute(
            "read measurements",
            "SELECT env_role, series, values_json FROM measurements "
            "WHERE run_id = ? AND source = ? AND profile = ?",
            (run_id, source, self._profile),
        )
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}

    def save_artifact(self, run_id: str, name: str, media_type: str, content: bytes) -> None:
        self._execute(
            "save an artifact",
            self._upsert("artifacts"),
            (run_id, name, media_type, content, self._node, self._profile),
        )

    def artifacts(self, run_id: str) -> Iterator[tuple[str, str, bytes]]:
        rows = self._execute(
            "read artifacts",
            "SELECT name, media_type, content FROM artifacts WHERE run_id = ? AND profile = ?"
            + self._ordered("name"),
            (run_id, self._profile),
        )
        for name, media_type, content in rows:
            yield name, media_type, bytes(content)  # PostgreSQL hands back a memoryview

    # other pillars ----------------------------------------------------------------------
    def save_section_result(self, run_id: str, result: SectionResult) -> None:
        self._execute(
            f"save a {result.section} result",
            self._upsert("section_results"),
            (
                run_id,
                result.section,
                result.key,
                result.env_role,
                result.verdict,
                json.dumps(result.payload, default=str),
                time.time(),
                self._node,
                self._profile,
            ),
        )

    def section_results(self, run_id: str, section: str) -> list[SectionResult]:
        rows = self._execute(
            f"read {section} results",
            "SELECT section, key, env_role, verdict, payload_json FROM section_results "
            "WHERE run_id = ? AND section = ? AND profile = ?" + self._ordered("key", "env_role"),
            (run_id, section, self._profile),
        )
        return [SectionResult(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def done_section_keys(self, run_id: str, section: str) -> set[tuple[str, str]]:
        rows = self._execute(
            f"read finished {section} units",
            "SELECT key, env_role FROM section_results "
            "WHERE run_id = ? AND section = ? AND profile = ?",
            (run_id, section, self._profile),
        )
        return {(r[0], r[1]) for r in rows}

    # raw rows: history, compare and copy ------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query written with SQLite's ``?`` placeholders."""
        return self._execute("read", sql, tuple(params))
