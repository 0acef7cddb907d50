"""The fleet executor on Ray: read every node's profile, run units pinned to nodes.

Every task is pinned to its node (hard node affinity, no retries elsewhere): a unit's result
must come from the hardware it was meant for, so a unit whose node dies is reported LOST
rather than quietly re-run on another profile. LOST is claimed only when Ray's node table
counts the node dead; a worker that crashed on a live node is the unit's failure, with its
cause. ``ray_connect`` makes one; ``ray_spread`` places actors on distinct nodes. Only these
three modules import Ray, and only when a fleet is used.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from torchcanary.errors import FleetError
from torchcanary.fleet import node_side
from torchcanary.fleet.executor import Assignment, Executor, tagged_result
from torchcanary.fleet.ray_spread import SpreadGroup, can_hold, spread_group
from torchcanary.fleet.secrets import strip_data, strip_env, strip_text
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit, noticed_since
from torchcanary.hardware_profile import FleetNode, HardwareProfile

_POLL_S = 1.0
# Ray's resource names for the accelerators it manages besides GPUs (NVIDIA, AMD, Intel and
# METAX GPUs are all "GPU"): AWS Neuron, Google TPU, Intel Gaudi, Huawei Ascend, Rebellions,
# and (Ray 2.60) FuriosaAI, Mobilint and Tenstorrent. A unit asks for all a node has.
ACCELERATOR_RESOURCES = (
    "neuron_cores",
    "TPU",
    "HPU",
    "NPU",
    "RBLN",
    "FURIOSA",
    "MBLT",
    "TTNPU",
)
# How long Ray's node table may lag a worker's news that its node died: the head marks a
# node dead after its health checks fail (Ray's defaults: 5 misses, 3 s apart, 10 s each).
NODE_DEATH_NOTICE_S = 60.0
# How long reading one of a unit's results may take once Ray says it is ready: beyond it
# the unit ends FAILED rather than holding the driver's last wait for ever.
RESULT_READ_S = 120.0


class RayExecutor:
    """The Executor interface on a connected Ray cluster."""

    engine = "ray"

    def __init__(self, ray: ModuleType, *, owns_connection: bool) -> None:
        self._ray = ray
        self._owns_connection = owns_connection
        self._collect = ray.remote(node_side.collect_hardware_facts)
        self._stream_unit = ray.remote(node_side.stream_unit)
        self.silent_nodes: list[str] = []
        self.discovery_notes: list[str] = []  # each Ray node is its own: nothing to merge

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
            resources = info.get("Resources") or {}
            cpus = float(resources.get("CPU", 1.0))
            address = info.get("NodeManagerAddress", "")
            accelerators = tuple(
                (name, float(resources[name]))
                for name in ACCELERATOR_RESOURCES
                if resources.get(name, 0) >= 1
            )
            nodes.append(
                FleetNode(
                    info["NodeID"],
                    address,
                    profile,
                    cpus=max(cpus, 1.0),
                    gpus=int(resources.get("GPU", 0)),
                    accelerators=accelerators,
                )
            )
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
            unit = assignment.unit
            # Asking for the GPUs is what makes Ray set CUDA_VISIBLE_DEVICES (and the other
            # vendors' variables) to them: a unit asking none sees "" on Ray before 2.60's
            # change and every GPU of the node, held by nobody, after it.
            held = {"resources": dict(unit.resources)} if unit.resources else {}
            generator = self._stream_unit.options(
                num_cpus=unit.num_cpus,
                num_gpus=unit.num_gpus,
                **held,
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
        last_life = time.monotonic()  # the unit's last sign of life: its dispatch, a piece
        try:
            for ref in generator:
                value = self._ray.get(ref, timeout=RESULT_READ_S)
                result = tagged_result(UnitResult.from_json(value), assignment.node)
                if result.status is not UnitStatus.PARTIAL:
                    end = result
                    return
                put(result)
                last_life = time.monotonic()
            end = self._failed(assignment, UnitStatus.FAILED, "the unit ended without a result")
        except Exception as exc:  # a broken stream is its unit's end, told to the driver
            end = self._broken(exc, assignment, last_life)
        finally:
            # Put on every way out: a reader that ended silently would leave the driver
            # waiting on the queue for ever.
            put(end or self._failed(assignment, UnitStatus.FAILED, "error: its reader stopped"))

    def close(self) -> None:
        if self._owns_connection and self._ray.is_initialized():
            self._ray.shutdown()

    def _broken(self, exc: BaseException, assignment: Assignment, last_life: float) -> UnitResult:
        """The end of a unit whose result could not be brought back, and why.

        LOST only when Ray's node table counts the node dead (the unit may run again
        elsewhere), with how long after ``last_life`` that was known; otherwise FAILED
        with the cause: the unit could not run, its worker crashed on a live node, or its
        result could not be read here.
        """
        exceptions = self._ray.exceptions
        cause = one_line(exc)
        if isinstance(exc, exceptions.GetTimeoutError):
            why = f"error: the unit's result did not arrive within {RESULT_READ_S:g} s: {cause}"
            return self._failed(assignment, UnitStatus.FAILED, why)
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
            return self._failed(assignment, UnitStatus.FAILED, why + one_line(asking))
        if dead:
            why = f"node {node_id[:12]} went away before the unit finished: {cause}"
            noticed = noticed_since(last_life)
            return replace(self._failed(assignment, UnitStatus.LOST, why), noticed_s=noticed)
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
    def _shippable(unit: WorkUnit) -> WorkUnit:
        return replace(unit, payload=strip_data(dict(unit.payload)), env=strip_env(unit.env))

    def node_alive(self, node_id: str) -> bool:
        """Whether Ray still counts ``node_id`` among its live nodes."""
        return any(n["NodeID"] == node_id and n.get("Alive") for n in self._ray.nodes())

    def notice_bound(self) -> tuple[float, str]:
        return NODE_DEATH_NOTICE_S, "Ray's node health checks, with a margin"

    def require_nodes(self, count: int, gpus: int = 0) -> None:
        """FleetError at once when the cluster has fewer than ``count`` live nodes with a CPU
        (and ``gpus`` GPUs): ``spread`` would otherwise wait out its timeout to say so."""
        usable = [node for node in self._ray.nodes() if can_hold(node, gpus)]
        if len(usable) < count:
            each = f"a CPU and {gpus} GPU(s)" if gpus else "a CPU"
            raise FleetError(
                f"--nodes {count}: the Ray cluster has {len(usable)} live nodes with {each}; "
                f"add nodes or lower --nodes"
            )

    def spread(
        self,
        host_class: type,
        count: int,
        args: Sequence[Any],
        timeout_s: float = 60.0,
        gpus: int = 0,
    ) -> SpreadGroup:
        """``count`` instances of ``host_class``, each on a different node (see ``ray_spread``)."""
        return spread_group(self._ray, host_class, count, args, timeout_s, gpus)

    def _pinned(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


if TYPE_CHECKING:
    # mypy holds RayExecutor to the Executor protocol here, not at a user's desk.
    _conforms: type[Executor] = RayExecutor


def one_line(exc: BaseException) -> str:
    """An exception as one line, its type first, with no secret in it."""
    text = str(exc).strip().splitlines()
    return strip_text(f"{type(exc).__name__}: {text[0] if text else ''}")
