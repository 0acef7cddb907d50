"""What a Slurm job runs on its node: hardware facts, one work unit, or one host of a group.

``python -m torchcanary.fleet.slurm_node facts`` prints the node's facts (``node_side``);
``run UNIT.json OUT.jsonl`` runs one unit and appends each record the unit yields to
OUT.jsonl as one line, flushed and synced, so the driver tailing the shared folder reads
every piece the moment it is whole; a heartbeat file beside it is touched each second, so
the driver can tell how long ago the node last showed life. ``host FOLDER [INDEX]`` serves
one member of a host group (``fleet/slurm_hosts.py``) over a socket: JSON requests in,
JSON answers out, no pickle. Standard library only, beside the class the group names.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from torchcanary.fleet.node_side import collect_hardware_facts, stream_unit
from torchcanary.fleet.signed_lines import PRIVATE_UMASK, Refused, read_key, sign, verify
from torchcanary.fleet.unit import UnitResult
from torchcanary.node_kit.devices import visible_variables

BEAT_S = 1.0
HOST_SPEC = "spec.json"
STOP = "__stop__"


def beat_path(out: Path) -> Path:
    """The heartbeat file beside a unit's output."""
    return out.with_suffix(".beat")


def host_file(folder: Path, index: int) -> Path:
    """Where member ``index`` of a host group says where it listens."""
    return folder / f"host-{index}.json"


def node_facts() -> str:
    """The node's hardware facts, with the visible-devices variables Slurm set for this
    step (``visible``): what discovery compares with the GPUs the node's GRES names."""
    facts = json.loads(collect_hardware_facts())
    facts["visible"] = visible_variables(os.environ)
    return json.dumps(facts, sort_keys=True)


def run_unit(unit_path: Path, out: Path) -> None:
    """Run the unit in ``unit_path`` if its MAC matches the dispatch's key; each record is
    one signed, synced line of ``out``, naming the node it ran on (Slurm chose it among
    the profile's nodes)."""
    key = read_key(unit_path.parent)
    try:
        unit_json = verify(key, unit_path.read_text(encoding="utf-8").strip())
    except Refused as exc:
        raise SystemExit(f"slurm_node: unit file {unit_path} refused: {exc}") from None
    node = os.environ.get("SLURMD_NODENAME", "")
    stop = threading.Event()
    threading.Thread(target=_beat, args=(beat_path(out), stop), daemon=True).start()
    try:
        with out.open("a", encoding="utf-8") as lines:
            for record in stream_unit(unit_json):
                record = replace(UnitResult.from_json(record), node_id=node).to_json()
                lines.write(sign(key, record) + "\n")
                lines.flush()
                os.fsync(lines.fileno())
    finally:
        stop.set()


def _beat(path: Path, stop: threading.Event) -> None:
    """A count written each second: the driver reads what the file says, which a shared
    filesystem revalidates on open, where a cached mtime may lag for a minute (NFS)."""
    count = 0
    while True:
        count += 1
        path.write_text(str(count), encoding="utf-8")
        if stop.wait(BEAT_S):
            return


def serve_host(folder: Path, index: int) -> None:
    """Member ``index`` of a host group: make the host, answer calls until told to stop.

    The spec names the class (``module:Class``), its arguments after the index, the
    address each node listens on, and the key a caller must prove it holds.
    """
    spec = json.loads((folder / HOST_SPEC).read_text(encoding="utf-8"))
    module, _, name = str(spec["host_class"]).partition(":")
    host = getattr(importlib.import_module(module), name)(index, *spec["args"])
    node = os.environ.get("SLURMD_NODENAME", "")
    address = spec["addresses"].get(node, "127.0.0.1")
    with Listener((address, 0), authkey=bytes.fromhex(spec["key"])) as listener:
        port = listener.address[1]
        said = {"node": node, "address": address, "port": port, "pid": os.getpid()}
        host_file(folder, index).write_text(json.dumps(said), encoding="utf-8")
        with listener.accept() as connection:
            _answer(host, connection)


def _answer(host: Any, connection: Connection) -> None:
    """Each request ``{"method", "args"}`` answered ``{"value"}`` or ``{"error"}``."""
    while True:
        try:
            request = json.loads(connection.recv_bytes())
        except (EOFError, OSError):  # the driver went away: leave nothing running
            _close(host)
            return
        if request["method"] == STOP:
            connection.send_bytes(b"{}")
            return
        try:
            value = getattr(host, request["method"])(*request["args"])
            answer = {"value": value}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        connection.send_bytes(json.dumps(answer, default=str).encode())


def _close(host: Any) -> None:
    close = getattr(host, "close", None)
    if close is not None:
        close()


def main(argv: Sequence[str]) -> int:
    command, *rest = argv
    if command == "facts":
        print(node_facts())
    elif command == "run":
        os.umask(PRIVATE_UMASK)  # its lines and heartbeat: the user's alone
        run_unit(Path(rest[0]), Path(rest[1]))
    elif command == "host":
        index = int(rest[1]) if len(rest) > 1 else int(os.environ["SLURM_PROCID"])
        serve_host(Path(rest[0]), index)
    else:
        print(f"slurm_node: unknown command {command!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
