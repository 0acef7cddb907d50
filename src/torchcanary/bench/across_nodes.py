"""``torchcanary bench --fleet ADDR --nodes N``: the collectives family across N nodes.

"Benchmark on your communicator topology" as one flag. Each group of the schedule starts a
fresh set of ranks on the same N nodes (:class:`~torchcanary.bench.node_collectives.NodeRanks`)
once per side, in a random order per group as the local bench interleaves its sides; each
rank measures every op and size of the ``collectives`` family with one rank per node
(``world_size = N``), or on GPU nodes one rank per GPU of each node. The
samples are judged by the local bench's own comparison (``bench/compare.py``'s
``compare_pair`` and ``bench/verdicts.py``'s ``decide``, through ``sequential.judge``) and
stored as bench records with ``nodes`` set and nccl-tests' algbw / busbw per side, scoped
to the nodes and their profile, so the reports, JSON, JUnit and ``history --profile`` read
them per profile.

Differences from the local bench, on purpose: the other families do not run here (they are
one machine's); there are no interim looks (every group is measured); the ids end in
``xNnodes`` (``collective/all_reduce/4MiB/gloox2nodes``) so they never share a history with
N ranks on one machine. On GPU nodes (``device`` cuda, or auto with a GPU on every node) the
backend is nccl, one rank on each GPU of every node, so NCCL uses NVLink within a node and
the fabric across (``node_kit/rank_layout.py``; ids ``ncclx16on2nodes`` for 2 nodes of 8);
``backend = "nccl2"`` in ``[bench.collectives]`` runs the candidate's in-tree nccl2 the same
way (a baseline without it is recorded as skipped, with the reason). Their command lines
and rank numbers are tested; the collectives themselves: not checked: no GPU.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchcanary.bench import compare, sequential, verdicts
from torchcanary.bench.interleave import Measurements
from torchcanary.bench.node_collectives import NodeRanks, RankSchedule
from torchcanary.bench.payload import measured_payload, skipped_payload
from torchcanary.bench.result import BenchVerdict, bench_record, unmeasured_verdict
from torchcanary.bench.samples import BASELINE, Batch, BenchmarkSamples, Side
from torchcanary.bench.section import (
    SECTION,
    policy_rules,
    save_raw_samples,
    sides_for,
)
from torchcanary.bench.settings import BenchSettings
from torchcanary.context import RunContext
from torchcanary.errors import ConfigError
from torchcanary.hardware_profile import FleetNode
from torchcanary.node_kit.rank_layout import RankLayout, rank_layout
from torchcanary.nodes_work import NodesRun, Placement, placed_profile
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.section_types import PlannedUnit
from torchcanary.store.rows import BOTH, SectionResult
from torchcanary.worker.bench.specs import COLLECTIVE, benchmark_id

if TYPE_CHECKING:
    from torchcanary.node_kit.host_group import NodeFleet

NODE_BENCH_ARTIFACT = "node_bench.json"
FAMILY = "collectives"


def node_specs(
    settings: BenchSettings, nodes: int, gpus_everywhere: bool, gpus_each: int = 0
) -> tuple[RankLayout, list[dict[str, Any]]]:
    """Every op and size of the collectives family across ``nodes`` nodes, and where its
    ranks sit: on GPU nodes one on each of a node's ``gpus_each`` GPUs, else one per node
    (``node_kit/rank_layout.py``)."""
    if FAMILY not in settings.families:
        raise ConfigError(
            f"bench --nodes {nodes} runs the {FAMILY} family, which [bench] families leaves "
            f"out; add '{FAMILY}' to families"
        )
    table = settings.family(FAMILY)
    cuda = settings.device == "cuda" or (settings.device == "auto" and gpus_everywhere)
    backend = table["backend"] if table["backend"] != "auto" else ("nccl" if cuda else "gloo")
    device = "cuda" if cuda or backend.startswith("nccl") else "cpu"
    layout = rank_layout(nodes, gpus_each, device == "cuda")
    # Ranks on several GPUs of each node say how many nodes too: 2 x 8 and 4 x 4 differ.
    suffix = "nodes" if layout.per_node == 1 else f"on{nodes}nodes"
    specs = []
    for op in table["ops"]:
        for size in table["bytes"]:
            spec = {
                "kind": COLLECTIVE,
                "op": op,
                "bytes": size,
                "world_size": layout.world,
                "nodes": nodes,
                "backend": backend,
                "device": device,
            }
            specs.append({**spec, "id": f"{benchmark_id(spec)}{suffix}"})
    return layout, specs


def venue(
    executor: NodeFleet, address: str, nodes: int, gpus: int = 0, mixed: bool = False, **_: Any
) -> NodeBench:
    """The bench's ``across_nodes`` part of the section contract (``contract.py``)."""
    return NodeBench(executor, address, nodes, gpus, mixed)


@dataclass
class NodeBench:
    """The collectives across ``nodes`` nodes, baseline against candidate, stored and
    judged (a ``nodes_work.NodesWork``: the fleet's venue makes and decides the run)."""

    executor: NodeFleet
    address: str
    nodes: int
    gpus: int = 0  # each rank host's GPUs
    mixed: bool = False  # --fleet-mixed: nodes of several profiles, under mixed:A,B
    _held: _Held | None = None

    @property
    def label(self) -> str:
        return f"collectives across {self.nodes} nodes"

    def place(self, plan: RunPlan, progress: Progress) -> Placement:
        settings = BenchSettings.from_json(plan.section_settings(SECTION))
        seed = settings.seed or random.SystemRandom().randrange(1, 2**31)
        if FAMILY not in settings.families:
            node_specs(settings, self.nodes, False)  # raises, before any node is held
        profiles = {node.node_id: node for node in self.executor.discover()}
        ranks = NodeRanks(self.executor, self.nodes, self.gpus)
        try:
            placed = [profiles.get(place.node_id) for place in ranks.places]
            profile = placed_profile([_key(found) for found in placed], self.mixed)
            ranks.prepare(plan.to_json())
            gpus = all(node is not None and node.profile.gpu_count > 0 for node in placed)
            layout, specs = node_specs(settings, self.nodes, gpus, self.gpus)
        except BaseException:
            ranks.close()
            raise
        self._held = _Held(settings, seed, ranks, placed, specs, profile, layout)
        return Placement("+".join(place.node_id for place in ranks.places), profile)

    def release(self) -> None:
        if self._held is not None:
            self._held.ranks.close()

    def carry_out(self, run: NodesRun) -> None:
        assert self._held is not None, "place() comes first"
        held = self._held
        try:
            ctx = RunContext(
                run.run_id, run.results, run.plan, {}, run.output_dir, run.output_dir, run.progress
            )
            rng = random.Random(held.seed)
            measured = _measure(held, rng, run.progress)
            _judge_and_store(ctx, held.settings, held.seed, measured, self.nodes)
        finally:
            held.ranks.close()
        where = [
            {
                "node_id": place.node_id,
                "address": place.address,
                "profile": _key(found),
                "devices": (fact or {}).get("devices"),
            }
            for place, found, fact in zip(
                held.ranks.places, held.placed, held.ranks.facts, strict=True
            )
        ]
        run.store.save_artifact(
            run.run_id,
            NODE_BENCH_ARTIFACT,
            "application/json",
            json.dumps(
                {
                    "address": self.address,
                    "nodes": self.nodes,
                    "gpus": self.gpus,
                    "ranks_per_node": held.layout.per_node,
                    "profile": held.profile,
                    "placed": where,
                }
            ).encode(),
        )

    def planned_units(self, plan: RunPlan) -> dict[str, list[PlannedUnit]]:
        """The collectives across the nodes: each op and size, compared (``both``)."""
        assert self._held is not None, "place() comes first"
        return {SECTION: [PlannedUnit(spec["id"], BOTH) for spec in self._held.specs]}


@dataclass(frozen=True)
class _Held:
    """What a node bench holds between placing its ranks and measuring: the ranks, the
    nodes they landed on, the benchmarks they can run, and the one profile."""

    settings: BenchSettings
    seed: int
    ranks: NodeRanks
    placed: list[FleetNode | None]
    specs: list[dict[str, Any]]
    profile: str
    layout: RankLayout


def _key(node: FleetNode | None) -> str:
    return node.profile.key if node is not None else "unknown"


def _measure(held: _Held, rng: random.Random, progress: Progress) -> Measurements:
    """Every group: each side's fresh ranks in a random order, every spec still measurable."""
    ranks, specs, settings = held.ranks, held.specs, held.settings
    sides, _, _ = sides_for(settings)
    result = Measurements(
        {spec["id"]: BenchmarkSamples(spec["id"], spec) for spec in specs},
        device=specs[0]["device"] if specs else "cpu",
    )
    schedule = RankSchedule(
        rounds=settings.rounds,
        samples=settings.samples_per_round,
        min_sample_s=settings.min_sample_ms / 1000,
        budget_s=settings.group_budget_s / len(sides),
        timeout_s=settings.timeout_s * 0.9,
    )
    with progress.task(
        f"bench: collectives across {ranks.nodes} nodes", total=settings.groups
    ) as task:
        for group in range(settings.groups):
            entries = [spec for spec in specs if not result.benchmarks[spec["id"]].stopped]
            if not entries:
                result.ended_by = "settled"
                break
            for slot, side in enumerate(rng.sample(sides, len(sides))):
                answer = ranks.measure(
                    side.role, entries, entries[0]["backend"], schedule, held.layout
                )
                for spec in entries:
                    _add(result.benchmarks[spec["id"]], side, group, slot, answer.get(spec["id"]))
            result.groups_run = group + 1
            task.advance(f"{group + 1} of {settings.groups} groups done")
    return result


def _add(
    samples: BenchmarkSamples, side: Side, group: int, slot: int, answer: dict[str, Any] | None
) -> None:
    """One side's answer for one benchmark, as the local interleaver records it."""
    answer = answer or {"skipped": "no answer from rank 0"}
    for refusal in ("failed", "skipped"):
        if refusal in answer:
            getattr(samples, refusal)[side.name] = answer[refusal]
            return
    for round_index, times in enumerate(answer["batches"]):
        samples.add(side.name, Batch(group, round_index, slot, tuple(times)))
    samples.measure_s += answer["measure_s"]
    samples.number = answer["number"]


def _judge_and_store(
    ctx: RunContext, settings: BenchSettings, seed: int, measured: Measurements, nodes: int
) -> None:
    """The local bench's comparison and records, each with the node count."""
    sides, judged, control = sides_for(settings)
    max_slowdown = float(policy_rules(ctx.plan.policy)["bench_max_slowdown"])

    def pair_of(samples: BenchmarkSamples) -> dict[str, Any]:
        clock = compare.clock_for(samples.spec, settings.threads, settings.clock)
        return compare.compare_pair(
            samples,
            BASELINE.name,
            judged.name,
            control.name if control is not None else None,
            1 - settings.fdr,
            clock,
        )

    def decide_all(comparisons: dict[str, dict[str, Any]], fdr: float) -> dict[str, Any]:
        return verdicts.decide(
            comparisons,
            fdr,
            settings.equivalence,
            settings.aa,
            settings.min_effect,
            max_slowdown=max_slowdown,
        )

    finished = {key: samples for key, samples in measured.benchmarks.items() if not samples.stopped}
    decided, comparisons = sequential.judge(finished, {}, pair_of, decide_all, settings.fdr, 0)
    for key, samples in measured.benchmarks.items():
        save_raw_samples(ctx, sides, samples)
        if samples.stopped:
            verdict = unmeasured_verdict(samples.failed)
            payload = skipped_payload(samples, sides, settings, seed)
        else:
            verdict = BenchVerdict(decided[key]["verdict"])
            payload = measured_payload(
                samples,
                sides,
                comparisons[key],
                decided[key],
                measured,
                settings,
                seed,
                {},
                ctx.work_dir,
            )
        record = bench_record(key, verdict, {**payload, "nodes": nodes})
        ctx.store.save_section_result(ctx.run_id, SectionResult.of(SECTION, record))
