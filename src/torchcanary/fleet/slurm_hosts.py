"""One host per node on Slurm, for work across nodes (``--fleet slurm --nodes N``).

Slurm's ``HostGroup`` (``fleet/executor.py``): one batch job of ``N`` nodes, one task per
node, whose script is ``srun --no-kill`` starting ``slurm_node host`` on every node. Each
task makes the host (``host_class(index, *args)``, e.g. a drill's ``DrillHost``, which then
starts that node's torchrun as on Ray) and listens on its node's Slurm address for this
driver alone: a key written to the shared folder (mode 600) authenticates the driver, and
requests and answers are JSON (no pickle). A replacement member is a one-node job on a
spare node. A member whose connection breaks, or that does not answer in time, is gone.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from torchcanary.errors import FleetError
from torchcanary.fleet import slurm_cli
from torchcanary.fleet.signed_lines import write_private
from torchcanary.fleet.slurm_job_line import export_list, node_command
from torchcanary.fleet.slurm_node import HOST_SPEC, STOP, host_file
from torchcanary.fleet.slurm_site import SlurmSite
from torchcanary.node_kit.host_group import HostGroup, HostPlace


class JobOwner(Protocol):
    """What a host group needs of the Slurm executor that asked for it: where to submit,
    where results meet, and its job list (so closing the fleet cancels the hosts too)."""

    partition: str
    fleet_dir: Path
    site: SlurmSite

    def track(self, job_id: str) -> None: ...

    def forget(self, job_id: str) -> None: ...


_WAIT_S = 0.3


def spread_hosts(
    executor: JobOwner,
    host_class: type,
    count: int,
    args: Sequence[Any],
    timeout_s: float,
    gpus: int,
) -> SlurmHostGroup:
    """``count`` members on distinct nodes; FleetError (and the job cancelled) when Slurm
    cannot start them all within ``timeout_s``."""
    folder = executor.fleet_dir / f"hosts-{secrets.token_hex(6)}"
    folder.mkdir(mode=0o700, parents=True)
    key = secrets.token_hex(16)
    nodes = slurm_cli.sinfo_nodes(executor.partition)
    spec = {
        "host_class": f"{host_class.__module__}:{host_class.__qualname__}",
        "args": list(args),
        "addresses": {node.name: node.address for node in nodes},
        "key": key,
    }
    write_private(folder / HOST_SPEC, json.dumps(spec))
    group = SlurmHostGroup(executor, folder, key, gpus, member_cpus(nodes, gpus))
    step = f"srun --no-kill --kill-on-bad-exit=0 {group.command()}"
    # --no-kill: a node lost (a drill's node-kill) does not end the others' hosts.
    group.submit(["-N", str(count), "--ntasks-per-node=1", "--no-kill"], step)
    try:
        for index in range(count):
            group.join(index, timeout_s)
    except BaseException:
        group.close()
        raise
    return group


def member_cpus(nodes: Sequence[slurm_cli.SlurmNode], gpus: int) -> int:
    """The CPUs each member's job asks for: all of a node's, so torchrun and its ranks are
    not squeezed onto one core by the job's cgroup; the smallest usable node with the GPUs
    a member holds sets the figure (a larger ask would leave that node out). 1 when no
    such node is listed (Slurm then says why the job waits)."""
    fitting = [node.cpus for node in nodes if node.usable and node.gpus >= gpus]
    return max(1, min(fitting)) if fitting else 1


class SlurmHostGroup:
    """Members called by index over their connections; a gone member's call is None."""

    def __init__(
        self, executor: JobOwner, folder: Path, key: str, gpus: int, cpus: int = 1
    ) -> None:
        self._executor = executor
        self._folder = folder
        self._key = bytes.fromhex(key)
        self._gpus = gpus
        self._cpus = cpus
        self._jobs: list[str] = []
        self._connections: list[Connection | None] = []
        self._locks: list[threading.Lock] = []
        self.places: list[HostPlace] = []
        self.gone: set[int] = set()

    def command(self, *index: str) -> str:
        return node_command("host", str(self._folder), *index)

    def submit(self, shape: list[str], script: str) -> None:
        arguments = [
            "--no-requeue", "-p", self._executor.partition, *shape, "-c", str(self._cpus),
            f"--export={export_list()}", "-J", "torchcanary-hosts",
            "-o", str(self._folder / f"job-{len(self._jobs)}.log"),
            *self._executor.site.flags(),
        ]  # fmt: skip
        if self._gpus:
            arguments.append(f"--gres=gpu:{self._gpus}")
        job_id = slurm_cli.submit([*arguments, "--wrap", script])
        self._executor.track(job_id)
        self._jobs.append(job_id)

    def join(self, index: int, timeout_s: float) -> None:
        """Wait for member ``index`` to say where it listens, then connect to it."""
        said = host_file(self._folder, index)
        deadline = time.monotonic() + timeout_s
        while not said.exists():
            if time.monotonic() > deadline:
                state = slurm_cli.job_states(self._jobs[-1:]).get(self._jobs[-1])
                where = f"job {self._jobs[-1]} {state.state} ({state.reason})" if state else ""
                raise FleetError(
                    f"Slurm partition {self._executor.partition} did not start a host on "
                    f"distinct nodes within {timeout_s:.0f}s ({where}); add nodes or lower --nodes"
                )
            time.sleep(_WAIT_S)
        time.sleep(_WAIT_S)  # the file is written whole before the listener accepts
        where = json.loads(said.read_text(encoding="utf-8"))
        connection = Client((where["address"], int(where["port"])), authkey=self._key)
        while len(self._connections) <= index:
            self._connections.append(None)
            self._locks.append(threading.Lock())
            self.places.append(HostPlace("", "", False))
        self._connections[index] = connection
        self.places[index] = HostPlace(where["node"], where["address"], False)

    def spare_nodes(self) -> list[HostPlace]:
        """Usable nodes of the partition with the GPUs a member holds, holding none."""
        taken = {place.node_id for place in self.places}
        return [
            HostPlace(node.name, node.address, False)
            for node in slurm_cli.sinfo_nodes(self._executor.partition)
            if node.usable and node.gpus >= self._gpus and node.name not in taken
        ]

    def add_member(self) -> int | None:
        """One more member on a spare node (a dead one's replacement); its index, or None."""
        spare = self.spare_nodes()
        if not spare:
            return None
        index = len(self.places)
        self.submit(["-N1", "-n1", "-w", spare[0].node_id], self.command(str(index)))
        try:
            self.join(index, 120.0)
        except FleetError:
            return None
        return index

    def call(self, index: int, method: str, *args: Any, timeout_s: float = 600.0) -> Any:
        """``method(*args)`` on member ``index``; None once it is gone (or fails to answer)."""
        connection = self._connections[index] if index < len(self._connections) else None
        if index in self.gone or connection is None:
            return None
        with self._locks[index]:
            try:
                connection.send_bytes(json.dumps({"method": method, "args": list(args)}).encode())
                if not connection.poll(timeout_s):
                    raise TimeoutError(f"no answer within {timeout_s:.0f}s")
                answer = json.loads(connection.recv_bytes())
            except (OSError, EOFError, TimeoutError):
                self._drop(index)
                return None
        if "error" in answer:
            raise FleetError(f"host {index} ({self.places[index].node_id}): {answer['error']}")
        return answer["value"]

    def call_all(self, method: str, *args: Any, timeout_s: float = 600.0) -> list[Any]:
        """``method(*args)`` on every live member at once; None for a gone one."""
        return self.call_each(method, [args] * len(self.places), timeout_s)

    def call_each(
        self, method: str, args_by_index: Sequence[Sequence[Any]], timeout_s: float = 600.0
    ) -> list[Any]:
        """``method(*args_by_index[i])`` on every member i at once; None for a gone one."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.places))) as pool:
            calls = [
                pool.submit(self.call, index, method, *args_by_index[index], timeout_s=timeout_s)
                for index in range(len(self.places))
            ]
            return [call.result() for call in calls]

    def _drop(self, index: int) -> None:
        self.gone.add(index)
        connection, self._connections[index] = self._connections[index], None
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.close()

    def close(self) -> None:
        """Every member's ``close`` (its processes killed), then the members and their jobs."""
        with contextlib.suppress(FleetError):
            self.call_all("close", timeout_s=60.0)
        for index, connection in enumerate(self._connections):
            if connection is None:
                continue
            with contextlib.suppress(OSError, EOFError):
                connection.send_bytes(json.dumps({"method": STOP, "args": []}).encode())
                connection.poll(5.0)
            self._drop(index)
        slurm_cli.cancel(self._jobs)
        for job_id in self._jobs:
            self._executor.forget(job_id)
        shutil.rmtree(self._folder, ignore_errors=True)


if TYPE_CHECKING:
    # mypy holds SlurmHostGroup to the HostGroup protocol here, not at a user's desk.
    _conforms: type[HostGroup] = SlurmHostGroup
