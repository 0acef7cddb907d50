"""The unit of work a node runs, and the result that comes back to the driver.

Both are plain data with a JSON form so that any section can ship work later without the
executor knowing what the work is: a unit names a worker function (``"module:function"``)
and the JSON it is called with. This module is standard library only: it is imported on the
node as well as on the driver.
"""

from __future__ import annotations

import enum
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UNIT_SCHEMA = 2


class UnitStatus(str, enum.Enum):
    """How one unit ended; every dispatched unit ends in exactly one of these."""

    OK = "ok"
    # The worker function raised: the node is fine, the work is not.
    FAILED = "failed"
    # The node (or its worker process) went away before the unit finished; the work
    # itself said nothing, and the unit may be dispatched again.
    LOST = "lost"
    # One piece of a streaming unit's output (a store write from a section run on the
    # node); the unit goes on, and ends later in one of the three above.
    PARTIAL = "partial"


@dataclass(frozen=True)
class WorkUnit:
    """One piece of work for one node, e.g. "run these probe ids in env spec X".

    ``worker`` is ``"package.module:function"``; the function takes the ``payload`` mapping
    and yields JSON-able mappings, each sent home as it comes. ``env`` holds the only
    environment variables the node gets from the driver (secrets are stripped before
    shipping). ``num_cpus``, ``num_gpus`` and ``resources`` (other accelerators, by the
    engine's name for them) are what the unit holds on its node while it runs; the engine
    sets the unit's visible-devices variables from them.
    """

    unit_id: str
    worker: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    num_cpus: float = 1.0
    num_gpus: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        module, sep, function = self.worker.partition(":")
        if not (module and sep and function):
            raise ValueError(f"worker must be 'module:function', got {self.worker!r}")
        # A fraction of a GPU would let two units share one device: never here.
        if not isinstance(self.num_gpus, int) or self.num_gpus < 0:
            raise ValueError(f"num_gpus must be a whole number >= 0, got {self.num_gpus!r}")

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": UNIT_SCHEMA,
                "unit_id": self.unit_id,
                "worker": self.worker,
                "payload": dict(self.payload),
                "env": dict(self.env),
                "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus,
                "resources": dict(self.resources),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> WorkUnit:
        data = json.loads(text)
        _check_schema(data, "work unit")
        return cls(
            unit_id=data["unit_id"],
            worker=data["worker"],
            payload=data["payload"],
            env=data["env"],
            num_cpus=data["num_cpus"],
            num_gpus=data["num_gpus"],
            resources=data["resources"],
        )


def noticed_since(last_life: float) -> float:
    """Seconds from ``last_life`` (a ``time.monotonic()``) to now, rounded *up* to a tenth:
    a unit struck just past a 4 s bound reads 4.1 s, never a "4.0 s" that looks in bound."""
    return math.ceil((time.monotonic() - last_life) * 10) / 10


@dataclass(frozen=True)
class UnitResult:
    """What became of one unit, tagged with the node and hardware profile it ran on.

    ``output`` is one piece the worker yielded (on a PARTIAL result; ``None`` on a unit's
    end); ``error`` is one line saying what went wrong (``None`` unless FAILED or LOST).
    ``noticed_s``, on a LOST end only, is how long after the unit's last sign of life
    reached the driver (a piece, a heartbeat, or its dispatch) the engine said its node
    was gone: the time it took to notice the loss.
    """

    unit_id: str
    status: UnitStatus
    node_id: str
    profile_key: str
    output: Mapping[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    noticed_s: float | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": UNIT_SCHEMA,
                "unit_id": self.unit_id,
                "status": self.status.value,
                "node_id": self.node_id,
                "profile_key": self.profile_key,
                "output": None if self.output is None else dict(self.output),
                "error": self.error,
                "seconds": self.seconds,
                "noticed_s": self.noticed_s,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> UnitResult:
        data = json.loads(text)
        _check_schema(data, "unit result")
        return cls(
            unit_id=data["unit_id"],
            status=UnitStatus(data["status"]),
            node_id=data["node_id"],
            profile_key=data["profile_key"],
            output=data["output"],
            error=data["error"],
            seconds=data["seconds"],
            noticed_s=data.get("noticed_s"),  # set by the driver's engine, not the node
        )


def _check_schema(data: Mapping[str, Any], what: str) -> None:
    if data.get("schema") != UNIT_SCHEMA:
        raise ValueError(f"{what} has schema {data.get('schema')!r}, expected {UNIT_SCHEMA}")
