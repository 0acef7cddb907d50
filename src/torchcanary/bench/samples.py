"""The raw measurements of one benchmark, kept with the structure that produced them.

A sample is seconds per call. Samples come in batches; each batch belongs to one side
(baseline, its A/A twin, candidate), one round group (a set of fresh worker processes) and
one round (one interleaved A B ... visit). The statistics need that structure: drift is
cancelled within a round and process-to-process variance lives between groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Side:
    """One measured arm: ``name`` in the statistics, ``role`` of its environment, and the
    role it is stored under (an A/A twin is stored apart from the baseline it copies)."""

    name: str
    role: str
    store_role: str


BASELINE = Side("A", "baseline", "baseline")
BASELINE_TWIN = Side("A2", "baseline", "baseline-aa")
CANDIDATE = Side("B", "candidate", "candidate")


@dataclass(frozen=True)
class Batch:
    group: int
    round: int
    slot: int  # position within the round's randomised order
    times_s: tuple[float, ...]
    cpu_s: tuple[float, ...] = ()

    def values(self, clock: str) -> tuple[float, ...]:
        return self.cpu_s if clock == "cpu" and self.cpu_s else self.times_s


@dataclass
class BenchmarkSamples:
    """Everything measured for one benchmark across all sides."""

    bench_id: str
    spec: dict[str, Any]
    batches: dict[str, list[Batch]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # side -> why it could not run
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # side -> status, error
    number: int | None = None  # calls per sample (the calibrated inner loop)
    batch_size: int = 1  # samples per side and round
    warmups: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    extras: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per-sample facts
    dispatch: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> ops
    measure_s: float = 0.0
    settled_at: int | None = None  # worker groups after which its verdict was settled

    @property
    def measuring(self) -> bool:
        """Still to be measured in the next group: neither stopped nor settled."""
        return not self.stopped and self.settled_at is None

    @property
    def stopped(self) -> bool:
        """A side skipped or failed: measuring more of it would only repeat that."""
        return bool(self.skipped or self.failed)

    def first_groups(self, groups: int) -> BenchmarkSamples:
        """What had been measured after ``groups`` worker groups: a sequential look replayed."""
        cut = BenchmarkSamples(self.bench_id, self.spec, number=self.number)
        for side, batches in self.batches.items():
            for batch in batches:
                if batch.group < groups:
                    cut.add(side, batch)
        return cut

    def add(self, side: str, batch: Batch) -> None:
        self.batches.setdefault(side, []).append(batch)

    def times(self, side: str, clock: str = "wall") -> list[float]:
        """Seconds per call on ``clock``: "wall" (or device) time, or process "cpu" time."""
        return [t for batch in self.batches.get(side, []) for t in batch.values(clock)]

    def flat(self, side: str) -> dict[str, list[float]]:
        """Aligned per-sample series for storing: times, group, round (and CPU times)."""
        batches = self.batches.get(side, [])
        series: dict[str, list[float]] = {"samples_s": [], "group": [], "round": []}
        for batch in batches:
            series["samples_s"] += batch.times_s
            series["group"] += [float(batch.group)] * len(batch.times_s)
            series["round"] += [float(batch.round)] * len(batch.times_s)
        if batches and all(len(b.cpu_s) == len(b.times_s) for b in batches):
            series["cpu_s"] = [c for batch in batches for c in batch.cpu_s]
        return series
