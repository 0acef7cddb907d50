"""Copy every run of one store into another (SQLite to PostgreSQL and back).

Rows move as they are stored (the JSON text byte for byte, artifacts as bytes), run by run
and table by table in the schema's order, so references always point at a copied run. A
run already in the target is replaced by the source's, so a copy cut short can be redone.
"""

from __future__ import annotations

from collections.abc import Callable

from torchcanary.store.base import ResultStore
from torchcanary.store.schema import PRIMARY_KEYS, TABLE_COLUMNS


def copy_store(
    source: ResultStore,
    target: ResultStore,
    on_run: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Copy all of ``source`` into ``target``; the number of rows copied per table."""
    copied = dict.fromkeys(TABLE_COLUMNS, 0)
    run_ids = [row[0] for row in source.query("SELECT run_id FROM runs ORDER BY created_at")]
    for run_id in run_ids:
        for table, columns in TABLE_COLUMNS.items():
            rows = source.query(
                f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = ? "
                f"ORDER BY {', '.join(PRIMARY_KEYS[table])}",
                (run_id,),
            )
            if rows:
                copied[table] += target.insert_rows(table, rows)
        if on_run is not None:
            on_run(run_id)
    return copied
