"""How often explain's 95 % share intervals hold the truth, by simulation, old and new.

    PYTHONPATH=src python benchmarks/explain_interval_coverage.py [--trials 500] [--noise 0.05]

Simulates the settings counterfactual: each round times the baseline B, the candidate C
(``--slowdown`` times slower) and the candidate with one setting set back X, which recovers
a known share of the slowdown (0, a half, all of it). Every time carries the round's own
drift (shared by the arms of a round) and its own log-normal noise (``--noise``). For n = 3,
5 and 10 rounds it prints, per true share:

- coverage: how often the interval holds the true share, for the old method (the ratio of
  the rounds' medians with a percentile bootstrap over rounds, resampled whole) and the new
  one (``explain.shares.ratio``: Fieller's interval over per-round log ratios), of the
  trials where it shows a share; "no share" is how often the new one shows none (its
  rounds did not tell the slowdown apart from 0: explain then says so);
- fires: how often the share counts as a cause, the old rule (low end above 0) against the
  new one (low end above ``shares.MATERIAL``): for a true share of 0 that is the rate a
  setting that does nothing is named, for 1 the rate the real cause is found.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Sequence

from torchcanary.explain import shares

TRUTHS = (0.0, 0.5, 1.0)
ROUNDS = (3, 5, 10)
DRAWS = 1000


def _old_share(rows: Sequence[tuple[float, float, float]]) -> float:
    base, cand, fixed = (statistics.median(row[i] for row in rows) for i in range(3))
    return math.log(cand / fixed) / math.log(cand / base)


def _old_interval(rows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """The method explain used before: a percentile bootstrap over whole rounds (kept here
    only to measure it against)."""
    rng = random.Random(31)
    drawn = []
    for _ in range(DRAWS):
        try:
            drawn.append(_old_share(rng.choices(rows, k=len(rows))))
        except ZeroDivisionError:
            continue
    if len(drawn) < DRAWS // 2:
        return None
    drawn.sort()
    return drawn[int(0.025 * (len(drawn) - 1))], drawn[round(0.975 * (len(drawn) - 1))]


def _rounds(
    rng: random.Random, n: int, truth: float, slowdown: float, noise: float
) -> list[tuple[float, float, float]]:
    log_slowdown = math.log(slowdown)
    rows = []
    for _ in range(n):
        drift = rng.gauss(0.0, noise)
        base = math.exp(drift + rng.gauss(0.0, noise))
        cand = math.exp(drift + log_slowdown + rng.gauss(0.0, noise))
        fixed = math.exp(drift + (1 - truth) * log_slowdown + rng.gauss(0.0, noise))
        rows.append((base, cand, fixed))
    return rows


def _new_interval(rows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    recovered = [math.log(c / x) for _, c, x in rows]
    slowdown = [math.log(c / b) for b, c, _ in rows]
    share = shares.ratio(recovered, slowdown)
    return (share[1], share[2]) if share is not None else None


def simulate(trials: int, slowdown: float, noise: float) -> list[dict[str, float]]:
    rng = random.Random(7)
    table = []
    for n in ROUNDS:
        for truth in TRUTHS:
            counts = dict.fromkeys(("old", "new", "none", "old_fires", "new_fires"), 0)
            for _ in range(trials):
                rows = _rounds(rng, n, truth, slowdown, noise)
                old, new = _old_interval(rows), _new_interval(rows)
                if old is not None:
                    counts["old"] += old[0] <= truth <= old[1]
                    counts["old_fires"] += old[0] > 0
                if new is None:
                    counts["none"] += 1
                else:
                    counts["new"] += new[0] <= truth <= new[1]
                    counts["new_fires"] += new[0] > shares.MATERIAL
            shown = max(trials - counts["none"], 1)
            rates = {k: v / trials for k, v in counts.items()}
            table.append({"n": n, "truth": truth, **rates, "new": counts["new"] / shown})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--slowdown", type=float, default=1.5)
    parser.add_argument("--noise", type=float, default=0.05)
    args = parser.parse_args()
    print(
        f"{args.trials} trials per cell; candidate x{args.slowdown} slower; noise "
        f"{args.noise:.0%} per time plus {args.noise:.0%} drift per round; 95 % intervals\n"
    )
    print(
        "| rounds | true share | old coverage | new coverage | new: no share "
        f"| old fires (low > 0) | new fires (low > {shares.MATERIAL:.2f}) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in simulate(args.trials, args.slowdown, args.noise):
        print(
            f"| {row['n']:.0f} | {row['truth']:.1f} | {row['old']:.1%} | {row['new']:.1%} "
            f"| {row['none']:.1%} | {row['old_fires']:.1%} | {row['new_fires']:.1%} |"
        )


if __name__ == "__main__":
    main()
