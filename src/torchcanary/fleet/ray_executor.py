"""The fleet executor on Ray: connect, read every node's profile, run units pinned to nodes.

This is the only module that imports Ray, and only when a fleet is used. Every task is
pinned to its node (hard node affinity, no retries elsewhere): a unit's result must come
from the hardware it was meant for, so a unit whose node dies is reported LOST rather
than quietly re-run on another profile. LOST is claimed only when Ray's node table counts
the node dead; a worker that crashed on a live node is the unit's failure, with its cause.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import torchcanary
from torchcanary.errors import FleetError
from torchcanary.fleet import node_side
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.profile import FleetNode, HardwareProfile
from torchcanary.fleet.secrets import strip_data, strip_env, strip_text
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit

DEFAULT_CONNECT_TIMEOUT_S = 15.0
_POLL_S = 1.0
# How long Ray's node table may lag a worker's news that its node died: the head marks a
# node dead after its health checks fail (Ray's defaults: 5 misses, 3 s apart, 10 s each).
NODE_DEATH_NOTICE_S = 60.0
_FIX = "check the address (HOST:PORT or ray://HEAD:10001) and that the Ray head node is up"
# What Ray's client raises with when the head's client server refuses a connection.
_REFUSED = "Initialization failure from server"
_RETRY_PAUSE_S = 2.0


def connect(
    address: str, *, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, ship_code: bool = True
) -> RayExecutor:
    """Connect to the Ray cluster at ``address`` (``ray://HEAD:10001``, ``HOST:PORT``, ``auto``).

    ``auto`` joins the Ray job this process runs in, or the cluster ``RAY_ADDRESS`` names.
    An address that cannot be reached raises FleetError within about ``timeout_s``: Ray's
    own client retries for minutes, so the address is probed first and ``ray.init`` is
    given a deadline. ``ship_code`` sends this torchcanary package to the nodes (Ray's
    ``py_modules``), so nodes need only Python and Ray, not torchcanary installed.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return RayExecutor(ray, owns_connection=False)
    target = _resolve(address)
    if target is not None:
        _probe(address, target, timeout_s)
    init_kwargs: dict[str, Any] = {
        "address": address,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if ship_code:
        init_kwargs["runtime_env"] = {"py_modules": [str(Path(torchcanary.__file__).parent)]}
    _init_with_deadline(ray, address, init_kwargs, timeout_s)
    return RayExecutor(ray, owns_connection=True)


class RayExecutor:
    """The Executor interface on a connected Ray cluster."""

    def __init__(self, ray: ModuleType, *, owns_connection: bool) -> None:
        self._ray = ray
        self._owns_connection = owns_connection
        self._collect = ray.remote(node_side.collect_hardware_facts)
        self._stream_unit = ray.remote(node_side.stream_unit)
        self.silent_nodes: list[str] = []

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def discover(self, timeout_s: float = 60.0) -> list[FleetNode]:
        """Every live node's profile, read by a task pinned to that node.

        A node that does not answer within ``timeout_s`` is left out and named in
        ``silent_nodes``, so one sick node does not stop the fleet.
        """
        alive = [node for node in self._ray.nodes() if node.get("Alive")]
        pending = {
            self._collect.options(
                num_cpus=0, max_retries=0, scheduling_strategy=self._pinned(node["NodeID"])
            ).remote(): node
            for node in alive
        }
        ready, not_ready = self._ray.wait(
            list(pending), num_returns=len(pending), timeout=timeout_s
        )
        nodes: list[FleetNode] = []
        self.silent_nodes = [pending[ref]["NodeID"] for ref in not_ready]
        for ref in not_ready:
            self._ray.cancel(ref, force=True)
        for ref in ready:
            info = pending[ref]
            try:
                facts = json.loads(self._ray.get(ref))
            except self._ray.exceptions.RayError:
                self.silent_nodes.append(info["NodeID"])
                continue
            profile = HardwareProfile.from_facts(facts, info.get("Labels") or {})
            cpus = float((info.get("Resources") or {}).get("CPU", 1.0))
            address = info.get("NodeManagerAddress", "")
            nodes.append(FleetNode(info["NodeID"], address, profile, cpus=max(cpus, 1.0)))
        if not nodes:
            raise FleetError(f"no node of the Ray cluster answered within {timeout_s:.0f}s")
        return sorted(nodes, key=lambda node: node.node_id)

    def dispatch_streaming(self, assignments: Sequence[Assignment]) -> Iterator[UnitResult]:
        """Run every unit on its node; yield each piece and each end, tagged, as it comes.

        Every unit is sent before this returns (not when the iterator is first read).
        Secrets are stripped from each unit before it leaves and from each result before
        it is handed back. A thread per unit reads its Ray generator (its pieces arrive in
        order) and hands each result to one queue, read here; a unit whose node dies ends
        LOST after the pieces it had sent, one whose worker process crashes on a live node,
        or whose result cannot be read, ends FAILED with why. Each thread puts its unit's
        end whatever breaks, so the queue is never waited on for a unit that cannot end.
        """
        arrived: queue.Queue[UnitResult] = queue.Queue()
        for assignment in assignments:
            generator = self._stream_unit.options(
                num_cpus=assignment.unit.num_cpus,
                max_retries=0,
                num_returns="streaming",
                scheduling_strategy=self._pinned(assignment.node.node_id),
            ).remote(self._shippable(assignment.unit).to_json())
            threading.Thread(
                target=self._read_stream,
                args=(generator, assignment, arrived.put),
                name=f"torchcanary-fleet-{assignment.unit.unit_id}",
                daemon=True,
            ).start()
        return self._ends(arrived, len(assignments))

    @staticmethod
    def _ends(arrived: queue.Queue[UnitResult], units: int) -> Iterator[UnitResult]:
        while units:
            result = arrived.get()
            units -= result.status is not UnitStatus.PARTIAL
            yield result

    def _read_stream(
        self, generator: Any, assignment: Assignment, put: Callable[[UnitResult], None]
    ) -> None:
        end: UnitResult | None = None
        try:
            for ref in generator:
                result = self._tagged(UnitResult.from_json(self._ray.get(ref)), assignment.node)
                if result.status is not UnitStatus.PARTIAL:
                    end = result
                    return
                put(result)
            end = self._failed(assignment, UnitStatus.FAILED, "the unit ended without a result")
        except Exception as exc:  # a broken stream is its unit's end, told to the driver
            end = self._broken(exc, assignment)
        finally:
            # Put on every way out: a reader that ended silently would leave the driver
            # waiting on the queue for ever.
            put(end or self._failed(assignment, UnitStatus.FAILED, "error: its reader stopped"))

    def close(self) -> None:
        if self._owns_connection and self._ray.is_initialized():
            self._ray.shutdown()

    def _broken(self, exc: BaseException, assignment: Assignment) -> UnitResult:
        """The end of a unit whose result could not be brought back, and why.

        LOST only when Ray's node table counts the node dead (the unit may run again
        elsewhere); otherwise FAILED with the cause: the unit could not run, its worker
        crashed on a live node, or its result could not be read here.
        """
        exceptions = self._ray.exceptions
        cause = _one_line(exc)
        if isinstance(exc, exceptions.RayTaskError | exceptions.RuntimeEnvSetupError):
            # The node is alive but could not run the unit (e.g. cannot import the worker).
            return self._failed(assignment, UnitStatus.FAILED, cause)
        if not isinstance(exc, exceptions.RayError):
            why = f"error: the unit's result could not be read on the driver: {cause}"
            return self._failed(assignment, UnitStatus.FAILED, why)
        node_id = assignment.node.node_id
        # A crashed worker's owner has asked about its node already: WorkerCrashedError
        # says the node lived. Other errors wait for the table to catch up with a death.
        wait_s = 0.0 if isinstance(exc, exceptions.WorkerCrashedError) else NODE_DEATH_NOTICE_S
        try:
            dead = self._node_dead(node_id, wait_s)
        except Exception as asking:  # the connection itself may be what broke
            why = f"error: {cause}; Ray could not say whether node {node_id[:12]} lives: "
            return self._failed(assignment, UnitStatus.FAILED, why + _one_line(asking))
        if dead:
            why = f"node {node_id[:12]} went away before the unit finished: {cause}"
            return self._failed(assignment, UnitStatus.LOST, why)
        why = f"worker crashed on a live node ({node_id[:12]}): {cause}"
        return self._failed(assignment, UnitStatus.FAILED, why)

    def _node_dead(self, node_id: str, wait_s: float) -> bool:
        """Whether Ray's node table counts ``node_id`` dead, asked until it does or for
        ``wait_s``: a task hears of its node's death before the head's health checks end."""
        deadline = time.monotonic() + wait_s
        while self.node_alive(node_id):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S / 2)
        return True

    @staticmethod
    def _failed(assignment: Assignment, status: UnitStatus, why: str) -> UnitResult:
        node = assignment.node
        return UnitResult(
            assignment.unit.unit_id, status, node.node_id, node.profile.key, error=why
        )

    @staticmethod
    def _tagged(result: UnitResult, node: FleetNode) -> UnitResult:
        """The result with its node and profile, and with no secret left in it."""
        return replace(
            result,
            output=None if result.output is None else strip_data(dict(result.output)),
            error=None if result.error is None else strip_text(result.error),
            node_id=node.node_id,
            profile_key=node.profile.key,
        )

    @staticmethod
    def _shippable(unit: WorkUnit) -> WorkUnit:
        return replace(unit, payload=strip_data(dict(unit.payload)), env=strip_env(unit.env))

    def node_alive(self, node_id: str) -> bool:
        """Whether Ray still counts ``node_id`` among its live nodes."""
        return any(n["NodeID"] == node_id and n.get("Alive") for n in self._ray.nodes())

    def require_nodes(self, count: int) -> None:
        """FleetError at once when the cluster has fewer than ``count`` live nodes with a CPU.

        ``spread`` would otherwise wait out its timeout before saying so.
        """
        usable = [
            node
            for node in self._ray.nodes()
            if node.get("Alive") and (node.get("Resources") or {}).get("CPU", 0) >= 1
        ]
        if len(usable) < count:
            raise FleetError(
                f"--nodes {count}: the Ray cluster has {len(usable)} live nodes with a CPU; "
                f"add nodes or lower --nodes"
            )

    def spread(
        self, host_class: type, count: int, args: Sequence[Any], timeout_s: float = 60.0
    ) -> SpreadGroup:
        """``count`` instances of ``host_class``, each on a different node (STRICT_SPREAD).

        Each holds one CPU of its node. FleetError when the cluster has fewer than ``count``
        nodes with a CPU free within ``timeout_s``: a multi-node drill never falls back to
        ranks sharing a node.
        """
        from ray.util.placement_group import (
            placement_group,
            placement_group_table,
            remove_placement_group,
        )
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group([{"CPU": 1}] * count, strategy="STRICT_SPREAD")
        ready, _ = self._ray.wait([group.ready()], timeout=timeout_s)
        if not ready:
            remove_placement_group(group)
            raise FleetError(
                f"the Ray cluster has no {count} distinct nodes with a free CPU "
                f"(STRICT_SPREAD placement group not ready within {timeout_s:.0f}s); "
                f"add nodes or lower --nodes"
            )
        node_ids = placement_group_table(group)["bundles_to_node_id"]
        addresses = {
            node["NodeID"]: node.get("NodeManagerAddress", "")
            for node in self._ray.nodes()
            if node.get("Alive")
        }
        head_ids = {
            node["NodeID"]
            for node in self._ray.nodes()
            if "node:__internal_head__" in (node.get("Resources") or {})
        }
        actor_class = self._ray.remote(host_class)
        handles = [
            actor_class.options(
                num_cpus=1,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=index
                ),
            ).remote(index, *args)
            for index in range(count)
        ]
        places = [
            SpreadPlace(node_ids[i], addresses.get(node_ids[i], ""), node_ids[i] in head_ids)
            for i in range(count)
        ]
        return SpreadGroup(
            self._ray, group, handles, places, remove_placement_group, (actor_class, args)
        )

    def _pinned(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


@dataclass(frozen=True)
class SpreadPlace:
    """Where one member of a spread group runs."""

    node_id: str
    address: str
    is_head: bool


class SpreadGroup:
    """Actors on distinct nodes, called by index; a call to a dead node's actor is None."""

    def __init__(
        self,
        ray: ModuleType,
        group: Any,
        handles: list[Any],
        places: list[SpreadPlace],
        remove: Callable[[Any], None],
        member: tuple[Any, Sequence[Any]],
    ) -> None:
        self._ray = ray
        self._group = group
        self._handles = handles
        self.places = places
        self._remove = remove
        self._member = member  # the actor class and its arguments after the index
        self.gone: set[int] = set()

    def spare_nodes(self) -> list[SpreadPlace]:
        """Live nodes with a CPU that hold no member of the group."""
        taken = {place.node_id for place in self.places}
        return [
            SpreadPlace(
                node["NodeID"],
                node.get("NodeManagerAddress", ""),
                "node:__internal_head__" in (node.get("Resources") or {}),
            )
            for node in self._ray.nodes()
            if node.get("Alive")
            and node["NodeID"] not in taken
            and (node.get("Resources") or {}).get("CPU", 0) >= 1
        ]

    def add_member(self) -> int | None:
        """One more member on a spare node (a replacement for a dead one); its index, or
        None when the cluster has no spare node.

        It is pinned to that node, outside the placement group: the group's bundle on a
        dead node is Ray's to reschedule, and the drill must know where its member runs.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        spare = self.spare_nodes()
        if not spare:
            return None
        place = spare[0]
        actor_class, args = self._member
        index = len(self._handles)
        self._handles.append(
            actor_class.options(
                num_cpus=1,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(place.node_id, soft=False),
            ).remote(index, *args)
        )
        self.places.append(place)
        return index

    def call(self, index: int, method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """``method(*args)`` on member ``index``; None once its node (or actor) is gone."""
        if index in self.gone:
            return None
        try:
            ref = getattr(self._handles[index], method).remote(*args)
            return self._ray.get(ref, timeout=timeout_s)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
            self.gone.add(index)
            return None

    def call_all(self, method: str, *args: Any, timeout_s: float = 600.0) -> list[Any]:
        """``method(*args)`` on every live member at once; None for a gone one."""
        return self.call_each(method, [args] * len(self._handles), timeout_s)

    def call_each(
        self, method: str, args_by_index: Sequence[Sequence[Any]], timeout_s: float = 600.0
    ) -> list[Any]:
        """``method(*args_by_index[i])`` on every member i at once; None for a gone one."""
        refs = {
            index: getattr(handle, method).remote(*args_by_index[index])
            for index, handle in enumerate(self._handles)
            if index not in self.gone
        }
        results: list[Any] = [None] * len(self._handles)
        for index, ref in refs.items():
            try:
                results[index] = self._ray.get(ref, timeout=timeout_s)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                self.gone.add(index)
        return results

    def close(self) -> None:
        """Every member's ``close`` (its processes killed), then the actors and the group."""
        self.call_all("close", timeout_s=60.0)
        for handle in self._handles:
            with contextlib.suppress(Exception):
                self._ray.kill(handle)
        with contextlib.suppress(Exception):
            self._remove(self._group)


if TYPE_CHECKING:
    # mypy holds RayExecutor to the Executor protocol here, not at a user's desk.
    _conforms: type[Executor] = RayExecutor


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError as exc:
        raise FleetError(
            f"--fleet needs Ray, which is not installed ({exc}); "
            "install it with: pip install 'torchcanary[ray]'"
        ) from None
    return ray


def _resolve(address: str) -> tuple[str, int] | None:
    """The head's host and port to probe, or None when Ray finds the cluster itself."""
    if address == "auto":
        import os

        address = os.environ.get("RAY_ADDRESS", "")
        if not address or address in ("auto", "local"):
            return None
    host_port = address.removeprefix("ray://").rstrip("/")
    host, sep, port = host_port.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"cannot read the Ray cluster address {address!r}; {_FIX}")
    return host.strip("[]"), int(port)


def _probe(address: str, target: tuple[str, int], timeout_s: float) -> None:
    try:
        with socket.create_connection(target, timeout=min(timeout_s, 5.0)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FleetError(f"cannot reach the Ray cluster at {address} ({reason}); {_FIX}") from None


def _init_with_deadline(
    ray: ModuleType, address: str, init_kwargs: dict[str, Any], timeout_s: float
) -> None:
    """``ray.init`` that gives up after ``timeout_s``: a wrong port can make it wait minutes.

    A Ray client server that could not start this client's own server (on a busy head,
    Ray's proxier gives it 30 s) refuses with "Initialization failure from server"; that is
    tried again while the deadline allows, and the error names every refusal.
    """
    deadline = time.monotonic() + timeout_s
    refusals: list[str] = []
    while True:
        outcome = _init_once(ray, init_kwargs, max(deadline - time.monotonic(), 0.0))
        if outcome is None:
            return
        refusal = _server_refusal(outcome)
        if refusal is None:
            break
        refusals.append(refusal)
        if deadline - time.monotonic() < _RETRY_PAUSE_S:
            break
        time.sleep(_RETRY_PAUSE_S)
    raise FleetError(f"{_connect_failure(address, timeout_s, outcome, refusals)}; {_FIX}")


class _NoAnswer(Exception):
    """``ray.init`` was still trying when the deadline came."""


def _connect_failure(
    address: str, timeout_s: float, last: BaseException, refusals: list[str]
) -> str:
    """Why connecting failed, naming every refusal of the client server before."""
    if _server_refusal(last) is not None:
        return (
            f"cannot connect to the Ray cluster at {address}: its client server refused "
            f"{len(refusals)} connection(s) in {timeout_s:.0f}s, the last: {refusals[-1]}"
        )
    before = (
        f" (its client server refused {len(refusals)} connection(s) first, the last: "
        f"{refusals[-1]})"
        if refusals
        else ""
    )
    if isinstance(last, _NoAnswer):
        return f"the Ray cluster at {address} did not answer within {timeout_s:.0f}s{before}"
    return f"cannot connect to the Ray cluster at {address}: {_one_line(last)}{before}"


def _init_once(
    ray: ModuleType, init_kwargs: dict[str, Any], timeout_s: float
) -> BaseException | None:
    """One ``ray.init``: None once connected, else its error (``_NoAnswer`` past the time).

    Connecting from a thread is the point (the deadline); a try that outlives it goes on
    in its daemon thread, as Ray's own retries cannot be stopped from here.
    """
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            ray.init(**init_kwargs)
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    # Ray warns on stderr about connecting from a thread, which would make the one-line
    # errors that follow two lines.
    ray_worker_log = logging.getLogger("ray._private.worker")
    ray_worker_log.addFilter(_not_main_thread_warning)
    thread = threading.Thread(target=attempt, name="torchcanary-ray-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    ray_worker_log.removeFilter(_not_main_thread_warning)
    return outcome[0] if outcome else _NoAnswer()


def _server_refusal(exc: BaseException) -> str | None:
    """What a Ray client server said when it refused the connection, or None if it did not.

    Ray puts the server's traceback after its first line; the last line says what failed.
    """
    text = str(exc).strip()
    if not (isinstance(exc, ConnectionAbortedError) and text.startswith(_REFUSED)):
        return None
    said = text.removeprefix(_REFUSED).lstrip(":").strip().splitlines()
    return strip_text(said[-1].strip() if said else "no reason given")[:300]


def _not_main_thread_warning(record: logging.LogRecord) -> bool:
    return "is not the main thread" not in record.getMessage()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return strip_text(f"{type(exc).__name__}: {text[0] if text else ''}")
