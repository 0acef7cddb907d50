"""Merges the recordings pytest-xdist workers wrote (one folder each, ``worker-gw0``, ...,
inside the recording's folder) into the recording's own files, as one process would have
written them: calls distinct by (site, callable, signature, modes, values), counts summed,
each kept call's values moved into the one ``values.bin`` (copied file by file, as a
recording's values may be large; format: ``worker/replay/encode.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from torchcanary.worker.calls import CALLS_WORKER_FOLDER


def merge_workers(folder: Path) -> int:
    """Merge the workers' recordings inside ``folder`` into it; returns how many there were
    (0: nothing to merge, the folder is left as it is)."""
    workers = sorted(p for p in folder.glob(f"{CALLS_WORKER_FOLDER}*") if p.is_dir())
    workers = [w for w in workers if (w / "calls.jsonl").is_file()]
    if not workers:
        return 0
    sources = [folder] if (folder / "calls.jsonl").is_file() else []
    merged: dict[str, dict[str, Any]] = {}
    meta: dict[str, Any] = {
        "calls": 0,
        "not_sampled": 0,
        "not_examined": 0,
        "not_followed": {},
        "not_sampled_by": {},
    }
    imports: list[str] = []  # the modules that register their operators, all workers'
    joined = folder / "values.bin.merging"
    with open(joined, "wb") as values:
        for source in [*sources, *workers]:
            base = values.tell()
            with open(source / "values.bin", "rb") as part_values:
                shutil.copyfileobj(part_values, values)
            for line in (source / "calls.jsonl").read_text().splitlines():
                if line.strip():
                    _add(merged, json.loads(line), base)
            part = json.loads((source / "meta.json").read_text())
            meta = {
                **part,
                "calls": meta["calls"] + part.get("calls", 0),
                "not_sampled": meta["not_sampled"] + part.get("not_sampled", 0),
                "not_examined": meta["not_examined"] + part.get("not_examined", 0),
                "not_followed": meta["not_followed"],
                "not_sampled_by": meta["not_sampled_by"],
            }
            meta["imports"] = sorted({*imports, *part.get("imports", ())})
            imports = meta["imports"]
            for why, count in part.get("not_followed", {}).items():
                meta["not_followed"][why] = meta["not_followed"].get(why, 0) + count
            for name, count in part.get("not_sampled_by", {}).items():
                meta["not_sampled_by"][name] = meta["not_sampled_by"].get(name, 0) + count
        size = values.tell()
    calls = list(merged.values())
    for index, entry in enumerate(calls):
        entry["id"] = index
    not_replayable: dict[str, int] = {}
    for entry in calls:
        if not entry.get("replayable", True):
            why = str(entry.get("why_not"))
            not_replayable[why] = not_replayable.get(why, 0) + 1
    meta.update(distinct=len(calls), not_replayable=not_replayable, values_bytes=size)
    meta.pop("groups", None)  # each worker numbered its own; merged, they are not counted
    joined.replace(folder / "values.bin")
    (folder / "calls.jsonl").write_text("".join(json.dumps(entry) + "\n" for entry in calls))
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return len(workers)


def _add(merged: dict[str, dict[str, Any]], entry: dict[str, Any], base: int) -> None:
    site = entry.get("site") or {}
    where = [site.get("file"), site.get("line")]
    key = json.dumps(
        [
            *where,
            entry["callable"],
            entry.get("signature"),
            entry.get("context"),
            entry.get("values_key"),
        ],
        sort_keys=True,
    )
    known = merged.get(key)
    if known is not None:
        known["count"] = known.get("count", 1) + entry.get("count", 1)
        return
    entry["args"] = _moved(entry.get("args", []), base)
    entry["kwargs"] = _moved(entry.get("kwargs", {}), base)
    merged[key] = entry


def _moved(encoded: Any, base: int) -> Any:
    """``encoded`` with each kept tensor's offset moved by ``base`` bytes."""
    if isinstance(encoded, list):
        return [_moved(item, base) for item in encoded]
    if not isinstance(encoded, dict):
        return encoded
    data = encoded.get("data")
    if encoded.get("t") == "tensor" and isinstance(data, dict) and "offset" in data:
        return {**encoded, "data": {**data, "offset": data["offset"] + base}}
    return {key: _moved(value, base) for key, value in encoded.items()}
