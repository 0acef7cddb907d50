"""The smoke unit: the smallest real work a node can run and hand back.

It proves a node takes a unit, runs it with the driver's payload and returns plain JSON;
the fleet's tests and its overhead benchmark use it, and a run can send it to every chosen
node before shipping heavier sections. Standard library only (it runs on the node).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

from torchcanary.worker.calls import FLEET_SMOKE, FLEET_SMOKE_PIECES

WORKER = FLEET_SMOKE
PIECES_WORKER = FLEET_SMOKE_PIECES


def smoke(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Hash ``rounds`` blocks of data, wait ``sleep_s``, and say where that happened.

    ``fail`` makes it raise, standing for a unit whose work breaks on a healthy node;
    ``echo`` comes back unchanged and ``env`` names variables whose values are returned,
    so a test can see what reached the node.
    """
    if payload.get("fail"):
        raise RuntimeError(str(payload["fail"]))
    digest = hashlib.sha256()
    block = b"torchcanary" * 1024
    for _ in range(int(payload.get("rounds", 0))):
        digest.update(block)
    time.sleep(float(payload.get("sleep_s", 0.0)))
    return {
        "digest": digest.hexdigest(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        # Under Ray this is the node's raylet, which tells which node ran the unit.
        "parent_pid": os.getppid(),
        "echo": payload.get("echo"),
        # Pairs, not a mapping: a secret-named key would be dropped on the way back and
        # hide whether the secret reached the node.
        "env": [[name, os.environ.get(name)] for name in payload.get("env", [])],
    }


def smoke_pieces(payload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield ``pieces`` numbered pieces, ``gap_s`` apart, then raise if ``fail`` says so.

    The streaming counterpart of ``smoke``: what a section on a node does with its store
    writes, without the section.
    """
    for index in range(int(payload.get("pieces", 0))):
        yield {"piece": index, "pid": os.getpid()}
        time.sleep(float(payload.get("gap_s", 0.0)))
    if payload.get("fail"):
        raise RuntimeError(str(payload["fail"]))
