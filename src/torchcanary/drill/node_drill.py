"""One drill across nodes: ranks on distinct Ray nodes, a fault struck on one, measured.

The driver side of ``torchcanary drill --fleet ADDR --nodes N``. A STRICT_SPREAD placement
group puts one :class:`~torchcanary.drill.drill_host.DrillHost` on each of N nodes; node 0
hosts the rendezvous store, every node runs one torchrun (one rank; on GPU nodes one per
GPU, ``node_kit/rank_layout.py``) that rendezvouses with the others over the network at
the store's address, and the faults strike on the target
node (``target_rank``, a node index here): its rank killed or stopped, the whole node
killed (its drill processes and its Ray raylet), or its link to the other nodes cut or
slowed by the node itself (``node_kit/node_link.py``), which undoes it on its own.

Detection, recovery and lost work are measured by the same code as a drill on one machine
(``drill/timeline.py``, ``trajectory.py``) from the events every node sends back. The
figures put times from different nodes on one axis, so they assume the nodes' clocks agree
(NTP keeps them within milliseconds; on a local test cluster they are one clock). A restart
from a checkpoint needs a checkpoint folder every node sees (``--shared-dir``): with a
folder per node, the ranks come back from different steps and the restart deadlocks.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchcanary.drill import timeline, trajectory
from torchcanary.drill.catalog import RESTARTS, DrillSpec
from torchcanary.drill.drill import MAX_RESTARTS, DrillOutcome
from torchcanary.drill.drill_host import DrillHost, why_not_strikable
from torchcanary.drill.judging import against_reference, fault_facts, reference_facts
from torchcanary.drill.result import DrillVerdict
from torchcanary.hardware_profile import FleetNode
from torchcanary.node_kit.rank_layout import rank_layout
from torchcanary.nodes_work import placed_profile

if TYPE_CHECKING:
    from torchcanary.node_kit.host_group import HostGroup, NodeFleet

POLL_S = 0.2
# What a drill across nodes can do today; the others say so (not-checkable).
ACROSS_NODES = {
    "kill": ("restart", "restart-unshared", "timeout"),
    "hang": ("timeout",),
    "node-kill": ("timeout", "restart", "restart-unshared", "replace"),
    "net-down": ("timeout",),
    "net-slow": ("none",),
}
DEFAULT_NODE_DRILLS = ("kill:restart-unshared", "node-kill:timeout")
# Recoveries that restart the job from its checkpoint (``replace``: with a fresh node).
RESTARTING = (*RESTARTS, "replace")
# A cut outlasts the job's collective timeout by this much, so the fault surfaces before
# the node undoes it; a rate limit lasts as long as the drill may.
CUT_MARGIN_S = 10.0
POLL_TIMEOUT_S = 30.0


def _key(node: FleetNode | None) -> str:
    return node.profile.key if node is not None else "unknown"


def link_hold_s(spec: DrillSpec) -> float:
    """How long the struck node keeps its link cut or slowed, at most, on its own."""
    if spec.fault == "net-down":
        return spec.timeout_s + CUT_MARGIN_S
    return spec.drill_timeout_s


@dataclass
class _Strike:
    """The fault, once struck: when (the striking node's clock), where, what was done."""

    t: float | None = None
    detail: str = ""
    node: int | None = None
    pid: int | None = None
    rank: int | None = None
    replacement: int | None = None  # the member that took the dead node's place


@dataclass
class _Watch:
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    exit_codes: dict[int, int | None] = field(default_factory=dict)

    def all_events(self) -> list[dict[str, Any]]:
        merged = [event for events in self.events.values() for event in events]
        return sorted(merged, key=lambda event: float(event["t"]))


class NodeDrills:
    """Drills of one environment (role) across ``nodes`` nodes of the fleet: one rank per
    node, or one per GPU of each node on GPU nodes (``node_kit/rank_layout.py``)."""

    def __init__(
        self,
        executor: NodeFleet,
        plan_json: Mapping[str, Any],
        role: str,
        nodes: int,
        shared_dir: Path,
        gpus: int = 0,
        mixed: bool = False,
    ) -> None:
        self.nodes = nodes
        self.plan_json, self.role = dict(plan_json), role
        self.shared_dir = shared_dir
        self.executor = executor
        self.token = secrets.token_hex(8)
        self.group: HostGroup = executor.spread(DrillHost, nodes, [self.token], gpus=gpus)
        try:
            known = {node.node_id: node for node in executor.discover()}
            placed = [known.get(place.node_id) for place in self.group.places]
            self.profile = placed_profile([_key(node) for node in placed], mixed)
            gpu_nodes = all(node is not None and node.profile.gpu_count > 0 for node in placed)
            self.layout = rank_layout(nodes, gpus, gpu_nodes)
        except BaseException:
            self.group.close()
            raise
        facts = self.group.call_all("prepare", dict(plan_json), role)
        if any(fact is None for fact in facts):
            self.group.close()
            raise RuntimeError("a node of the drill went away while its environment was built")
        self.facts: list[dict[str, Any]] = facts
        self._reference: dict[str, Any] | None = None
        self._runs = 0

    def where(self) -> list[dict[str, Any]]:
        """Each node of the drill: its Ray node id, address, host and privileges."""
        return [
            {
                "node_id": place.node_id,
                "address": place.address,
                "host": fact["host"],
                "privileges": fact["privileges"],
                "devices": fact.get("devices"),
            }
            for place, fact in zip(self.group.places, self.facts, strict=True)
        ]

    def close(self) -> None:
        self.group.close()

    # the fault-free run ----------------------------------------------------------------
    def reference(self, spec: DrillSpec) -> dict[str, Any]:
        if self._reference is None:
            clean = replace(spec, fault="none", recovery="reference")
            watch, _, _, _ = self._launch_and_watch(clean, max_restarts=0)
            events = watch.all_events()
            done = [e for e in events if e["ev"] == "done"]
            digests = sorted({e["digest"] for e in done})
            self._reference = {
                "ok": len(done) == self.layout.world and len(digests) == 1,
                "final_loss": done[0]["final_loss"] if done else None,
                "steps": trajectory.reference_steps(events),
                "parallel": spec.parallel,
                "exit_codes": watch.exit_codes,
            }
            if not self._reference["ok"]:
                tails = self.group.call_all("log_tail", timeout_s=30)
                self._reference["reason"] = f"fault-free run did not finish: {tails}"[-800:]
        return self._reference

    # a drill ---------------------------------------------------------------------------
    def run(self, spec: DrillSpec) -> DrillOutcome:
        spec = replace(spec, ranks=self.layout.world)
        payload: dict[str, Any] = {
            "spec": spec.to_json(),
            "nodes": self.where(),
            "ranks_per_node": self.layout.per_node,
        }
        why = self._why_not(spec)
        if why:
            return DrillOutcome(DrillVerdict.NOT_CHECKABLE, {**payload, "reason": why})
        started = time.monotonic()
        restarts = MAX_RESTARTS if spec.recovery in RESTARTING else 0
        if spec.fault == "node-kill" and restarts:
            self.reference(spec)  # on all the nodes, while they are all alive
        watch, strike, bounded_out, exit_t = self._launch_and_watch(spec, restarts)
        payload["nodes"] = self.where()  # with the node that replaced a dead one, if any
        payload.update(self._measure(spec, watch, strike, exit_t))
        payload["bounded_out"] = bounded_out
        if spec.fault == "node-kill" and strike.t is not None and strike.node is not None:
            # ray_noticed_s or slurm_noticed_s: when the engine counted the node gone
            # (None: not within notice_waited, which says how long was waited, and why).
            wait_s, why = self.executor.notice_bound()
            if wait_s > spec.drill_timeout_s:
                why += f", cut to the drill's timeout {spec.drill_timeout_s:g} s"
                wait_s = spec.drill_timeout_s
            payload["notice_waited"] = f"up to {wait_s:.0f} s: {why}"
            payload[f"{self.executor.engine}_noticed_s"] = self._engine_notices(
                strike.node, strike.t, wait_s
            )
        payload["duration_s"] = time.monotonic() - started
        verdict, reason = self._judge(spec, strike, payload)
        payload["reason"] = reason
        if verdict is not DrillVerdict.PASSED:  # what each node's torchrun said, for the reader
            payload["logs"] = self.group.call_all("log_tail", timeout_s=30)
        return DrillOutcome(verdict, payload)

    def _engine_notices(self, node: int, struck_t: float, wait_s: float) -> float | None:
        """Seconds from the node's death until the engine counts it dead (None: not within
        ``wait_s``, the engine's own bound: Slurm's follows SlurmdTimeout)."""
        node_id = self.group.places[node].node_id
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not self.executor.node_alive(node_id):
                return time.time() - struck_t
            time.sleep(POLL_S)
        return None

    def _why_not(self, spec: DrillSpec) -> str:
        if spec.recovery not in ACROSS_NODES.get(spec.fault, ()):
            done = ", ".join(f"{f}:{r}" for f, rs in ACROSS_NODES.items() for r in rs)
            return f"{spec.key} is not built across nodes yet; across nodes: {done}"
        target = spec.target_rank
        if not 0 <= target < self.nodes:
            last = self.nodes - 1
            return f"target_rank {target} names no node of {self.nodes}: choose 0 to {last}"
        if target == 0 and spec.fault == "node-kill":
            return "node 0 hosts the rendezvous store: strike another node (target_rank 1)"
        if spec.recovery == "replace" and not self.group.spare_nodes():
            return (
                f"{spec.key} needs a spare node (a live Ray node with a CPU outside the "
                f"drill's {self.nodes}) to take the dead one's place: add one"
            )
        place = self.group.places[target]
        if spec.fault == "node-kill" and place.is_head:
            return (
                f"not checkable on {place.node_id[:12]}: it is the Ray head; killing it "
                "would end the cluster (give the head no CPU, or add nodes)"
            )
        privileges = self.facts[target]["privileges"]
        networks = [fact["privileges"]["network"] for fact in self.facts]
        shared = networks.count(privileges["network"]) > 1
        problem = why_not_strikable(spec.fault, privileges, shared)
        return f"not checkable on {place.node_id[:12]}: {problem}" if problem else ""

    def _launch_and_watch(
        self, spec: DrillSpec, max_restarts: int
    ) -> tuple[_Watch, _Strike, bool, float | None]:
        """Start the job on every node, strike once the target reaches the step, watch."""
        self._runs += 1
        name = f"{spec.fault}-{spec.recovery}-{self._runs}"
        checkpoints = self.shared_dir / self.token / name
        endpoint, least = self._launch(spec, name, checkpoints, max_restarts)
        watch, strike = _Watch(), _Strike()
        deadline = time.monotonic() + spec.drill_timeout_s
        settle: float | None = None
        exit_t: float | None = None
        # A node whose link to the driver is cut answers once the node restores it.
        poll_timeout_s = POLL_TIMEOUT_S + (link_hold_s(spec) if spec.fault == "net-down" else 0)
        while time.monotonic() < deadline:
            polls = self.group.call_all("poll", timeout_s=poll_timeout_s)
            for index, polled in enumerate(polls):
                if polled is not None:  # a dead node keeps the events it had sent
                    watch.events[index] = polled["events"]
                    watch.exit_codes[index] = polled["exit_code"]
            if spec.fault != "none" and strike.t is None:
                self._maybe_strike(spec, watch, strike)
                if spec.recovery == "replace" and strike.t is not None:
                    strike.replacement = self._join_replacement(
                        spec, name, str(checkpoints), endpoint, max_restarts, least
                    )
            errors = [
                e
                for e in watch.all_events()
                if e["ev"] == "error" and strike.t is not None and e["t"] > strike.t
            ]
            if errors and spec.recovery == "timeout" and settle is None:
                if spec.fault == "hang" and strike.pid is not None and strike.node is not None:
                    self.group.call(strike.node, "release", strike.pid)
                settle = time.monotonic() + spec.timeout_s + 10
            live = [
                i
                for i in range(len(self.group.places))
                if i not in self.group.gone and watch.exit_codes.get(i, 0) is None
            ]
            if not live and watch.exit_codes:
                exit_t = time.time()
                break
            if settle is not None and time.monotonic() > settle:
                break
            time.sleep(POLL_S)
        bounded_out = exit_t is None and settle is None
        shutil.rmtree(checkpoints, ignore_errors=True)  # megabytes each, no evidence
        return watch, strike, bounded_out, exit_t

    def _launch(
        self, spec: DrillSpec, name: str, checkpoints: Path, max_restarts: int
    ) -> tuple[str, int | None]:
        """A clean area on every node, the rendezvous store on node 0, each node's network
        set, then one rank on each: the store's endpoint, and the fewest nodes the job may
        go on with (None: all of them)."""
        spec_json = spec.to_json()
        self.group.call_all("reset", name, str(checkpoints))
        store_host = self.group.places[0].address or "127.0.0.1"
        endpoint = self.group.call(0, "start_store", spec_json, store_host)
        addresses = [place.address for place in self.group.places]
        for index in range(self.nodes):
            peers = [a for i, a in enumerate(addresses) if i != index]
            hold_s = link_hold_s(spec)
            self.group.call(index, "set_network", addresses[index], peers, spec.net_rate, hold_s)
        # A node that dies takes its rank for good: the restart goes on without it (or
        # with the fresh node that replaces it).
        elastic = spec.fault == "node-kill" and spec.recovery in RESTARTING
        least = self.nodes - 1 if elastic else None
        ranks = self._rank_args(spec_json, endpoint, max_restarts, least)
        self.group.call_all("start_rank", *ranks)
        return endpoint, least

    def _rank_args(
        self, spec_json: dict[str, Any], endpoint: str, max_restarts: int, least: int | None
    ) -> tuple[Any, ...]:
        """``start_rank``'s arguments on every member: its ranks as the layout places them
        (one per GPU on GPU nodes), all rendezvousing at ``endpoint``."""
        layout = self.layout
        return (
            spec_json, endpoint, self.nodes, max_restarts, least, layout.per_node, layout.on_gpus,
        )  # fmt: skip

    def _join_replacement(
        self,
        spec: DrillSpec,
        area_name: str,
        checkpoints: str,
        endpoint: str,
        max_restarts: int,
        least: int | None,
    ) -> int | None:
        """A fresh node in the dead one's place: its environment, then its torchrun joining
        the job's rendezvous, where the survivors' elastic agents admit it. Its index."""
        index = self.group.add_member()
        if index is None:
            return None
        fact = self.group.call(index, "prepare", self.plan_json, self.role)
        self.facts.append(fact or {"host": "", "privileges": {}, "index": index})
        if fact is None:
            return None
        self.group.call(index, "reset", area_name, checkpoints)
        peers = [
            place.address
            for i, place in enumerate(self.group.places)
            if i != index and i not in self.group.gone
        ]
        address = self.group.places[index].address
        self.group.call(index, "set_network", address, peers, spec.net_rate, link_hold_s(spec))
        ranks = self._rank_args(spec.to_json(), endpoint, max_restarts, least)
        self.group.call(index, "start_rank", *ranks)
        return index

    def _maybe_strike(self, spec: DrillSpec, watch: _Watch, strike: _Strike) -> None:
        for node, events in watch.events.items():
            if node != spec.target_rank:
                continue
            steps = [
                e
                for e in events
                if e["ev"] == "step" and int(e.get("attempt", 0)) == 0 and e["step"] >= spec.at_step
            ]
            if not steps:
                return
            pid = int(steps[0]["pid"])
            done = self.group.call(node, "strike", spec.fault, pid, timeout_s=POLL_TIMEOUT_S)
            strike.t = done["t"] if done else time.time()
            strike.detail = done["detail"] if done else f"node {node} went away when struck"
            strike.node, strike.pid, strike.rank = node, int(steps[0]["pid"]), steps[0]["rank"]
            if spec.fault == "node-kill":
                self.group.gone.add(node)
            return

    # measuring and judging -------------------------------------------------------------
    def _measure(
        self, spec: DrillSpec, watch: _Watch, strike: _Strike, exit_t: float | None
    ) -> dict[str, Any]:
        events = watch.all_events()
        failed_exit = any(code not in (0, None) for code in watch.exit_codes.values())
        figures = timeline.measure(events, strike.t, exit_t if failed_exit else None)
        # Each node's agent counts its own restarts (a failed rendezvous round counts too),
        # so the finished launch is each node's last one.
        done = [
            e
            for node_events in watch.events.values()
            for e in node_events
            if e["ev"] == "done"
            and int(e.get("attempt", 0)) == max(int(n.get("attempt", 0)) for n in node_events)
        ]
        last_attempt = max((int(e.get("attempt", 0)) for e in events), default=0)
        losses = sorted({float(e["final_loss"]) for e in done})
        errors = [e for e in events if e["ev"] == "error" and strike.t and e["t"] > strike.t]
        payload: dict[str, Any] = {
            **fault_facts(strike.detail, strike.rank, figures),
            "struck_node": strike.node,
            "replaced_by": strike.replacement,
            "final_loss": losses[0] if len(losses) == 1 else None,
            "finished_ranks": len(done),
            "params_identical": (len({e["digest"] for e in done}) == 1) if done else None,
            "restarts": last_attempt,
            "first_error": errors[0]["error"] if errors else None,
            "errors": [f"attempt {e.get('attempt')}: {e['error'][:200]}" for e in errors][:6],
            "error_kinds": sorted({e["kind"] for e in errors}),
            "exit_codes": {f"node{i}": code for i, code in watch.exit_codes.items()},
            "nodes_gone": sorted(self.group.gone),
            "timeline": timeline.compact(events, strike.t, strike.detail),
        }
        if strike.replacement is not None and strike.t is not None:
            joined = [
                float(e["t"]) for e in watch.events.get(strike.replacement, []) if e["ev"] == "step"
            ]
            payload["replacement_step_s"] = min(joined) - strike.t if joined else None
        if done and spec.recovery != "timeout":
            kept = ("ok", "final_loss", "reason")
            payload.update(reference_facts(events, self.reference(spec), kept))
        return payload

    def _judge(
        self, spec: DrillSpec, strike: _Strike, payload: dict[str, Any]
    ) -> tuple[DrillVerdict, str]:
        if strike.t is None:
            tails = self.group.call_all("log_tail", timeout_s=30)
            return DrillVerdict.ERROR, (
                f"the job never reached step {spec.at_step} on node {spec.target_rank}, so no "
                f"fault was injected: {tails}"[:800]
            )
        detect = payload["detect_s"]
        if spec.recovery == "timeout":
            if detect is None:
                return DrillVerdict.FAILED, (
                    f"{spec.fault} never surfaced on the other nodes within "
                    f"{spec.drill_timeout_s:g} s"
                )
            kinds = ", ".join(payload["error_kinds"]) or "an exit"
            return DrillVerdict.PASSED, (
                f"surfaced across nodes as {kinds} after {detect:.1f} s "
                f"(timeout {spec.timeout_s:g} s)"
            )
        if spec.recovery == "replace" and (
            strike.replacement is None or payload["finished_ranks"] < self.layout.world
        ):
            joined = "no fresh node joined" if strike.replacement is None else "a fresh node joined"
            return DrillVerdict.FAILED, (
                f"{joined}, and the job did not finish on {self.nodes} nodes after "
                f"{spec.fault}; first error: {payload['first_error'] or 'none recorded'}"
            )
        # A node-kill takes its rank for good; a replacement brings one back.
        left = len(self.group.places) - len(self.group.gone)
        if payload["finished_ranks"] < left * self.layout.per_node:
            return DrillVerdict.FAILED, (
                f"the job did not finish on all {left} nodes left after {spec.fault}; first "
                f"error: {payload['first_error'] or 'none recorded'}"
            )
        mismatch = against_reference(payload, "replicas on the nodes")
        if mismatch is not None:
            return mismatch
        where = (
            f"on {left} of {self.nodes} nodes"
            if left < self.nodes
            else f"across {self.nodes} nodes, node {strike.node} replaced by a fresh node"
            if strike.replacement is not None
            else f"across {self.nodes} nodes"
        )
        how = "ran on through the fault" if spec.recovery == "none" else "restarted"
        if spec.recovery != "none":
            how += f" {payload['restarts']}x"
        return DrillVerdict.PASSED, (f"{how} {where}; {trajectory.describe(payload['step_check'])}")
