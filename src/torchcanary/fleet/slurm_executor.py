"""The fleet executor on Slurm (``--fleet slurm`` or ``--fleet slurm:PARTITION``).

Profiles come from what Slurm knows: nodes that share features, GRES and CPUs are alike,
so any free node of each such group reads its hardware facts (``slurm_discovery.py``), and
a ``tcprofile_NAME`` feature names the profile outright, as Ray's node label does. Each
unit is one batch job that Slurm places on any idle node of its profile (``--constraint``
and ``--gres``, ``slurm_placement.py``) with the site's flags (``slurm_site.py``) and,
unless the site sets one, a time limit sized on the unit's past runs (``unit_time.py``); a
node's units are chained (``--dependency=afterany``), so one section holds a node at a
time, as on Ray. Unit files and result lines are signed (``signed_lines.py``).

Results come home through a folder every node sees (``--fleet-dir``): the job appends each
record of its unit as one synced JSON line (``slurm_node.py``) and a reader
(``slurm_follow.py``) tails it, so pieces are committed as they come. A unit ends with its
own end record; else Slurm's word decides: NODE_FAIL, CANCELLED, PREEMPTED, BOOT_FAIL are
LOST (the node or the scheduler took the work away; ``--resume`` sends it again), FAILED,
TIMEOUT, OUT_OF_MEMORY are FAILED with the job log's tail. Without slurmdbd there is no
sacct: states come from ``squeue`` (it keeps ended jobs for MinJobAge). Jobs get only
``--export``'s short list of variables, never the driver's whole environment (no store
password crosses).

No Slurm Python package is used: ``slurm_cli.py`` says why. Nothing imports this module
without ``--fleet slurm`` (``fleet/connect.py`` imports it by name).
"""

from __future__ import annotations

import queue
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from torchcanary.errors import FleetError
from torchcanary.fleet import slurm_cli
from torchcanary.fleet.executor import Assignment, Executor
from torchcanary.fleet.secrets import strip_data, strip_env
from torchcanary.fleet.signed_lines import new_key, sign, write_private
from torchcanary.fleet.slurm_discovery import GroupKey, GroupReader, group_key, merge_notes
from torchcanary.fleet.slurm_follow import FollowedUnit, UnitFollower, ended
from torchcanary.fleet.slurm_job_line import export_list, node_command
from torchcanary.fleet.slurm_placement import PROFILE_FEATURE, gres, placement
from torchcanary.fleet.slurm_site import SlurmSite
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit
from torchcanary.fleet.unit_time import limit_minutes
from torchcanary.hardware_profile import PROFILE_LABEL, FleetNode, HardwareProfile
from torchcanary.node_kit.host_group import HostGroup

# How long discovery waits for a free node of a group (every one may be busy).
DISCOVERY_TIMEOUT_S = 600.0
_LABEL = re.compile(r"^[A-Za-z0-9._-]+$")


def connect(partition: str, fleet_dir: Path | None, site: SlurmSite | None = None) -> SlurmExecutor:
    """The executor on ``partition`` (the default one when empty), results under
    ``fleet_dir`` (default ``canary-results/fleet`` here; it must be on storage every node
    sees), every job carrying the ``site`` flags. FleetError in one line when Slurm, the
    partition or the folder cannot be used."""
    chosen = partition or slurm_cli.default_partition()
    slurm_cli.check_partition(chosen)
    folder = (fleet_dir or Path("canary-results") / "fleet").resolve()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)  # units, result lines and job logs: this user's alone
        probe = folder / f".writable-{secrets.token_hex(4)}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise FleetError(
            f"--fleet-dir {folder} cannot be written ({exc.strerror}); name a folder every "
            "Slurm node sees at the same path: --fleet-dir DIR"
        ) from None
    return SlurmExecutor(chosen, folder, site or SlurmSite())


class SlurmExecutor:
    """The Executor interface on a Slurm partition, reached through its commands."""

    engine = "slurm"

    def __init__(self, partition: str, fleet_dir: Path, site: SlurmSite) -> None:
        self.partition = partition
        self.fleet_dir = fleet_dir
        self.site = site
        self.silent_nodes: list[str] = []
        self.discovery_notes: list[str] = []
        self._jobs: set[str] = set()  # every job submitted and not known ended
        self._groups = GroupReader(partition, site.flags())
        # Per profile, every node of the partition in its groups (any state), and the
        # partition's nodes, as the last discovery listed them: where its units may land.
        self._members: dict[str, list[slurm_cli.SlurmNode]] = {}
        self._every_node: list[slurm_cli.SlurmNode] = []
        self._stop = threading.Event()

    def __enter__(self) -> SlurmExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- nodes ------------------------------------------------------------------------------

    def discover(self, timeout_s: float = DISCOVERY_TIMEOUT_S) -> list[FleetNode]:
        """Every usable node of the partition with its profile, read on one node per group
        (``slurm_discovery.py``): a group that got no node within ``timeout_s`` is left
        out and named in ``silent_nodes``."""
        every_node = slurm_cli.sinfo_nodes(self.partition)
        # A node in an advanced reservation takes the work when the run names one.
        reserved_ok = bool(self.site.reservation)
        usable = [node for node in every_node if slurm_cli.usable_state(node.state, reserved_ok)]
        groups: dict[GroupKey, list[slurm_cli.SlurmNode]] = {}
        for node in usable:
            groups.setdefault(group_key(node), []).append(node)
        answers = self._groups.read_all(groups, every_node, timeout_s)
        nodes: list[FleetNode] = []
        self.silent_nodes = []
        profile_of: dict[GroupKey, str] = {}
        for key, group, read in zip(groups, groups.values(), answers, strict=True):
            if read is None:
                self.silent_nodes += [node.name for node in group]
                continue
            for node in group:
                profile = HardwareProfile.from_facts(
                    read.facts, {PROFILE_LABEL: profile_label(node)}
                )
                profile_of[key] = profile.key
                nodes.append(
                    FleetNode(
                        node.name,
                        node.address,
                        profile,
                        cpus=float(node.cpus),
                        gpus=node.gpus,
                        shortfall=read.shortfall,
                    )
                )
        self.discovery_notes = merge_notes(groups, profile_of)
        self._members = {}
        for node in every_node:
            if group_key(node) in profile_of:
                self._members.setdefault(profile_of[group_key(node)], []).append(node)
        self._every_node = every_node
        if not nodes:
            raise FleetError(
                f"no node of Slurm partition {self.partition} answered within {timeout_s:.0f}s"
                f" (usable: {len(usable)}); check sinfo -p {self.partition}"
            )
        return sorted(nodes, key=lambda node: node.node_id)

    def node_alive(self, node_id: str) -> bool:
        """Whether Slurm counts ``node_id`` up, answering and not drained."""
        return slurm_cli.usable_state(slurm_cli.node_state(node_id))

    def notice_bound(self) -> tuple[float, str]:
        """SlurmdTimeout, plus a margin for slurmctld's ping cycle (a fraction of it) and
        the poll: a node that loses power is counted down only after both."""
        timeout, source = slurm_cli.slurmd_timeout()
        margin = max(30.0, timeout / 2)
        return timeout + margin, f"{source} {timeout:.0f} s + {margin:.0f} s"

    def require_nodes(self, count: int, gpus: int = 0) -> None:
        """FleetError at once when the partition has fewer than ``count`` usable nodes with
        ``gpus`` GPUs each."""
        usable = [
            node
            for node in slurm_cli.sinfo_nodes(self.partition)
            if node.usable and node.gpus >= gpus
        ]
        if len(usable) < count:
            with_gpus = f" with {gpus} GPU(s)" if gpus else ""
            raise FleetError(
                f"--nodes {count}: Slurm partition {self.partition} has {len(usable)} usable "
                f"nodes{with_gpus}; add nodes or lower --nodes"
            )

    def spread(
        self,
        host_class: type,
        count: int,
        args: Sequence[Any],
        timeout_s: float = 60.0,
        gpus: int = 0,
    ) -> HostGroup:
        """``count`` hosts on distinct nodes, one job step each (``fleet/slurm_hosts.py``)."""
        from torchcanary.fleet.slurm_hosts import spread_hosts

        return spread_hosts(self, host_class, count, args, timeout_s, gpus)

    # -- units ------------------------------------------------------------------------------

    def dispatch_streaming(self, assignments: Sequence[Assignment]) -> Iterator[UnitResult]:
        """Submit every unit now (a node's units chained); yield each piece and end as read.

        A reader thread tails every unit's output file and asks squeue once a second; it
        puts each unit's end whatever breaks, so the iterator never waits for a unit that
        cannot end.
        """
        arrived: queue.Queue[UnitResult] = queue.Queue()
        batch = self.fleet_dir / f"units-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        batch.mkdir(mode=0o700)
        key = new_key(batch)
        units: list[FollowedUnit] = []
        last_on_node: dict[str, str] = {}
        nodes_of: dict[str, set[str]] = {}
        for assignment in assignments:
            nodes_of.setdefault(assignment.node.profile.key, set()).add(assignment.node.node_id)
        pinned = {profile for profile, names in nodes_of.items() if len(names) > 1}
        max_minutes = (
            None if self.site.sets_time else slurm_cli.partition_max_minutes(self.partition)
        )
        for index, assignment in enumerate(assignments):
            name = f"{index:03d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', assignment.unit.unit_id)}"
            unit = FollowedUnit(assignment, batch / f"{name}.jsonl", batch / f"{name}.log", key)
            write_private(batch / f"{name}.json", sign(key, _shippable(assignment.unit).to_json()))
            try:
                where = self._where(assignment, pinned)
                where += self._time_limit(assignment, max_minutes)
                unit.job_id = self._submit(unit, batch / f"{name}.json", where, last_on_node)
            except FleetError as exc:
                arrived.put(ended(assignment, UnitStatus.FAILED, f"error: {exc}"))
                continue
            last_on_node[assignment.node.node_id] = unit.job_id
            units.append(unit)
        follower = UnitFollower(self._placeable, self.forget, self._stop, self.site.lost_after_s)
        threading.Thread(
            target=follower.follow, args=(units, arrived.put), name="torchcanary-slurm", daemon=True
        ).start()
        return _ends(arrived, len(assignments))

    def _where(self, assignment: Assignment, pinned: set[str]) -> list[str]:
        """Placement flags: any node of the unit's profile (``slurm_placement.py``), or its
        own node where the profile's nodes each run their units (``--fleet-nodes all``)
        or discovery did not list the profile."""
        profile = assignment.node.profile.key
        if profile in pinned or profile not in self._members:
            return ["-w", assignment.node.node_id]
        return placement(self._members[profile], self._every_node)

    def _time_limit(self, assignment: Assignment, max_minutes: int | None) -> list[str]:
        """``--time`` from the unit's estimate (``unit_time.py``), unless the site sets one."""
        if self.site.sets_time:
            return []
        return [f"--time={limit_minutes(assignment.estimate_s, max_minutes)}"]

    def _placeable(self, assignment: Assignment) -> bool:
        """Whether some node the unit may land on is usable now."""
        profile = assignment.node.profile.key
        names = [node.name for node in self._members.get(profile, [])]
        return any(self.node_alive(name) for name in names or [assignment.node.node_id])

    def _submit(
        self,
        unit: FollowedUnit,
        unit_file: Path,
        where: list[str],
        last_on_node: dict[str, str],
    ) -> str:
        assignment = unit.assignment
        node = assignment.node.node_id
        arguments = [
            "--no-requeue", "-p", self.partition, *where, "-N1", "-n1",
            "-c", str(max(1, int(assignment.unit.num_cpus))),
            f"--export={export_list()}",
            "-J", f"torchcanary-{assignment.unit.unit_id}",
            "-o", str(unit.log),
            *self.site.flags(),
        ]  # fmt: skip
        arguments += gres(int(assignment.unit.num_gpus))
        if node in last_on_node:
            arguments.append(f"--dependency=afterany:{last_on_node[node]}")
        arguments += ["--wrap", node_command("run", str(unit_file), str(unit.out))]
        job_id = slurm_cli.submit(arguments)
        self._jobs.add(job_id)
        return job_id

    def close(self) -> None:
        """Stop following, and cancel every job of this executor still out."""
        self._stop.set()
        slurm_cli.cancel(sorted(self._jobs))
        self._jobs.clear()

    def track(self, job_id: str) -> None:
        """Count a job started for this executor (a host group's), cancelled at ``close``."""
        self._jobs.add(job_id)

    def forget(self, job_id: str) -> None:
        self._jobs.discard(job_id)


def profile_label(node: slurm_cli.SlurmNode) -> str:
    """The profile a ``tcprofile_NAME`` feature names; "" when none (facts decide)."""
    for feature in node.features:
        if feature.startswith(PROFILE_FEATURE):
            label = feature.removeprefix(PROFILE_FEATURE)
            if not _LABEL.match(label):
                raise FleetError(
                    f"node {node.name}: feature {feature!r} is not a usable profile name "
                    "(letters, digits, '.', '_', '-')"
                )
            return label
    return ""


def _ends(arrived: queue.Queue[UnitResult], units: int) -> Iterator[UnitResult]:
    while units:
        result = arrived.get()
        units -= result.status is not UnitStatus.PARTIAL
        yield result


def _shippable(unit: WorkUnit) -> WorkUnit:
    return replace(unit, payload=strip_data(dict(unit.payload)), env=strip_env(unit.env))


if TYPE_CHECKING:
    # mypy holds SlurmExecutor to the Executor protocol here, not at a user's desk.
    _conforms: type[Executor] = SlurmExecutor
