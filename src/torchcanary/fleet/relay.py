"""A store that lives on a fleet node: every write becomes a plain JSON record sent home.

A section runs on a node exactly as it runs locally, through ``ctx.store``; on the node that
store is a ``RelayStore``. Each write it receives (an environment's manifest, a probe result,
a benchmark comparison, an artifact) is handed to ``send`` as one JSON record the moment it
happens, and the driver ``replay``s the record into the real store, scoped to the node and
its profile. So every finished unit reaches the store as soon as it exists, with no
database connection (and no password) on the node.

Reads answer from what the section wrote on this node, plus the keys the driver says are
already stored for this profile (so ``--resume`` skips them on the node too).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from torchcanary.results import Manifest
from torchcanary.store.base import ResultStore
from torchcanary.store.rows import EnvironmentRow, RunRow, SectionResult
from torchcanary.store.schema import PRIMARY_KEYS

Record = dict[str, Any]
"""One write, as JSON: ``{"op": "rows", ...}``."""


class RelayStore:
    """The ``ResultStore`` a section sees on a fleet node; writes go to ``send``."""

    def __init__(
        self,
        run: RunRow,
        send: Callable[[Record], None],
        done_rows: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        done_sections: Mapping[str, Iterable[Sequence[str]]] | None = None,
    ) -> None:
        self._run = run
        self._send = send
        # A section's own table: the key columns of the rows already stored home, then
        # every row written here.
        self._rows = {
            table: [dict(row) for row in rows] for table, rows in (done_rows or {}).items()
        }
        self._done_sections = {
            name: {(key, role) for key, role in keys}
            for name, keys in (done_sections or {}).items()
        }
        self._environments: dict[str, EnvironmentRow] = {}
        self._measurements: dict[tuple[str, str, str], list[float]] = {}
        self._artifacts: dict[str, tuple[str, bytes]] = {}
        self._section_results: list[SectionResult] = []

    @property
    def location(self) -> str:
        return "the driver's store, through the fleet"

    @property
    def schema_version(self) -> int:
        from torchcanary.store.schema import SCHEMA_VERSION

        return SCHEMA_VERSION

    @property
    def profile(self) -> str:
        return ""

    def close(self) -> None:
        pass

    def __enter__(self) -> RelayStore:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def scoped(self, node: str, profile: str) -> ResultStore:
        return self  # a node stores only its own profile's results

    def run_profiles(self, run_id: str) -> dict[str, str]:
        return {}

    # runs: the driver owns them --------------------------------------------------------
    def create_run(self, plan: dict[str, Any]) -> str:
        raise NotImplementedError("runs are created by the fleet driver, not on a node")

    def set_run_status(self, run_id: str, status: str) -> None:
        pass

    def finish_run(self, run_id: str, decision: str, detail: dict[str, Any]) -> None:
        pass

    def run(self, run_id: str) -> RunRow:
        return self._run

    def runs(self) -> list[RunRow]:
        return [self._run]

    def latest_run(self, status: str | None = None) -> RunRow | None:
        return self._run

    # writes: kept here for the section's own reads, and sent home ----------------------
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
        self._environments[role] = EnvironmentRow(
            role, spec, python, torch_version, build_seconds, reused, manifest
        )
        self._send(
            {
                "op": "environment",
                "role": role,
                "spec": spec,
                "python": python,
                "torch_version": torch_version,
                "build_seconds": build_seconds,
                "reused": reused,
                "manifest": manifest.to_json(),
            }
        )

    def save_rows(self, doing: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        # Through JSON now, as the store would keep them.
        sent = [(table, json.loads(json.dumps(row, default=str))) for table, row in rows]
        for table, row in sent:
            self._rows.setdefault(table, []).append(row)
        self._send({"op": "rows", "doing": doing, "rows": [list(pair) for pair in sent]})

    def save_measurement(
        self, run_id: str, env_role: str, source: str, series: str, values: list[float]
    ) -> None:
        self._measurements[(env_role, source, series)] = list(values)
        self._send(
            {
                "op": "measurement",
                "env_role": env_role,
                "source": source,
                "series": series,
                "values": list(values),
            }
        )

    def save_artifact(self, run_id: str, name: str, media_type: str, content: bytes) -> None:
        self._artifacts[name] = (media_type, content)
        self._send(
            {
                "op": "artifact",
                "name": name,
                "media_type": media_type,
                "content_b64": base64.b64encode(content).decode("ascii"),
            }
        )

    def save_section_result(self, run_id: str, result: SectionResult) -> None:
        self._section_results.append(result)
        self._done_sections.setdefault(result.section, set()).add((result.key, result.env_role))
        self._send(
            {
                "op": "section_result",
                "section": result.section,
                "key": result.key,
                "env_role": result.env_role,
                "verdict": result.verdict,
                # Through JSON now, as the store would: the driver gets exactly what a
                # local run would have stored.
                "payload": json.loads(json.dumps(result.payload, default=str)),
            }
        )

    # reads: this node's writes, and what the driver says is stored already ------------
    def environments(self, run_id: str) -> dict[str, EnvironmentRow]:
        return dict(self._environments)

    def rows(
        self, table: str, run_id: str, columns: Sequence[str], order_by: Sequence[str] = ()
    ) -> list[tuple[Any, ...]]:
        found = sorted(
            self._rows.get(table, []), key=lambda row: [str(row.get(c, "")) for c in order_by]
        )
        return [tuple(row.get(column) for column in columns) for row in found]

    def measurements(self, run_id: str, source: str) -> dict[tuple[str, str], list[float]]:
        return {
            (role, series): values
            for (role, measured, series), values in self._measurements.items()
            if measured == source
        }

    def artifacts(self, run_id: str) -> Iterator[tuple[str, str, bytes]]:
        for name, (media_type, content) in sorted(self._artifacts.items()):
            yield name, media_type, content

    def section_results(self, run_id: str, section: str) -> list[SectionResult]:
        return [result for result in self._section_results if result.section == section]

    def done_section_keys(self, run_id: str, section: str) -> set[tuple[str, str]]:
        return set(self._done_sections.get(section, set()))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError("a fleet node has no database to query")

    def insert_rows(self, table: str, rows: Iterable[Sequence[Any]]) -> int:
        raise NotImplementedError("a fleet node has no database to copy into")


def replay(record: Record, store: ResultStore, run_id: str) -> str:
    """Commit one record from a node into ``store`` (already scoped); what it was, in words."""
    op = record["op"]
    if op == "environment":
        store.save_environment(
            run_id,
            record["role"],
            record["spec"],
            record["python"],
            record["torch_version"],
            float(record["build_seconds"]),
            bool(record["reused"]),
            Manifest.from_json(record["manifest"]),
        )
        return f"environment {record['role']}"
    if op == "rows":
        written = [(table, {**values, "run_id": run_id}) for table, values in record["rows"]]
        store.save_rows(record["doing"], written)
        if not written:
            return "nothing"
        table, first = written[0]
        keys = [c for c in PRIMARY_KEYS[table] if c not in ("run_id", "profile")]
        key = " ".join(str(first[c]) for c in keys)
        return f"{key}: {first['verdict']}" if "verdict" in first else key
    if op == "measurement":
        store.save_measurement(
            run_id, record["env_role"], record["source"], record["series"], record["values"]
        )
        return f"measurement {record['source']}"
    if op == "artifact":
        content = base64.b64decode(record["content_b64"])
        store.save_artifact(run_id, record["name"], record["media_type"], content)
        return f"artifact {record['name']}"
    if op == "section_result":
        row = SectionResult(
            record["section"],
            record["key"],
            record["env_role"],
            record["verdict"],
            record["payload"],
        )
        store.save_section_result(run_id, row)
        return f"{row.section} {row.key}: {row.verdict}"
    raise ValueError(f"unknown fleet record {op!r}")
