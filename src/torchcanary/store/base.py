"""What every store engine offers: the protocol the runner, sections and reports rely on.

Two engines implement it: SQLite (``store/sqlite.py``, the embedded default for one
engineer) and PostgreSQL (``store/postgres.py``, a store a team shares). Both hold the same
schema, brought forward by the same ordered migrations (``store/schema.py``), and both
commit every write at once, so a run killed mid-way keeps everything that had finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from torchcanary.results import Manifest
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult


class ResultStore(Protocol):
    """A results store, open. ``location`` is safe to print: it never holds a password."""

    @property
    def location(self) -> str: ...

    @property
    def schema_version(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> ResultStore: ...

    def __exit__(self, *exc: object) -> None: ...

    # fleet: results are kept per hardware profile ('' for a run on one machine)
    @property
    def profile(self) -> str: ...

    def scoped(self, node: str, profile: str) -> ResultStore:
        """The same store, writing and reading one fleet node's and profile's results."""
        ...

    def run_profiles(self, run_id: str) -> dict[str, str]:
        """Each fleet profile with results in ``run_id``, and the node that ran it."""
        ...

    # runs
    def create_run(self, plan: dict[str, Any]) -> str: ...

    def set_run_status(self, run_id: str, status: str) -> None: ...

    def finish_run(self, run_id: str, decision: str, detail: dict[str, Any]) -> None: ...

    def run(self, run_id: str) -> RunRow: ...

    def runs(self) -> list[RunRow]: ...

    def latest_run(self, status: str | None = None) -> RunRow | None: ...

    # environments
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
    ) -> None: ...

    def environments(self, run_id: str) -> dict[str, EnvironmentRow]: ...

    # a section's own table (its ``result_table``; the claims' is probe_results)
    def save_rows(self, doing: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Each ``(table, row)`` written together, scoped to this store's node and profile."""
        ...

    def rows(
        self, table: str, run_id: str, columns: Sequence[str], order_by: Sequence[str] = ()
    ) -> list[tuple[Any, ...]]:
        """``columns`` of ``table``'s rows of ``run_id`` in this store's profile."""
        ...

    # measurements and artifacts
    def save_measurement(
        self, run_id: str, env_role: str, source: str, series: str, values: list[float]
    ) -> None: ...

    def measurements(self, run_id: str, source: str) -> dict[tuple[str, str], list[float]]: ...

    def save_artifact(self, run_id: str, name: str, media_type: str, content: bytes) -> None: ...

    def artifacts(self, run_id: str) -> Iterable[tuple[str, str, bytes]]: ...

    # other pillars
    def save_section_result(self, run_id: str, result: SectionResult) -> None: ...

    def section_results(self, run_id: str, section: str) -> list[SectionResult]: ...

    def done_section_keys(self, run_id: str, section: str) -> set[tuple[str, str]]: ...

    # raw rows: history, compare and copy
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query written with SQLite's ``?`` placeholders."""
        ...

    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (all of ``table``'s columns, in order) as they are, in one transaction."""
        ...
