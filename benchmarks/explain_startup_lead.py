"""The start-up split by simulation: do its share intervals hold the truth, and do two runs
name the same leading part?

    PYTHONPATH=src python benchmarks/explain_startup_lead.py [--trials 1000]

Each round draws the per-round changes (candidate minus baseline, CPU seconds) of the
parts the way they were measured on the real environments under load: the build's own
libraries 130 ms (spread 8 ms), the rest of the import 140 ms (spread 100 ms), the
libraries both load 10 ms (spread 30 ms); the plain import's change is their sum plus the
noise of children of its own (spread 100 ms). For n = 3, 5 and 10 rounds it prints how
often each share's interval (``explain.shares.ratio``) holds the true share, of the trials
where the plain rounds reproduced the change, and how often two independent runs name the
same part first: by the largest share (the old rule) and by ``explain.startup.leading``.
"""

from __future__ import annotations

import argparse
import random

from torchcanary.explain import shares
from torchcanary.explain.startup import leading

PARTS = {"build": (0.130, 0.008), "python": (0.140, 0.100), "shared-libraries": (0.010, 0.030)}
PLAIN_NOISE = 0.100
TRUE_WHOLE = sum(mean for mean, _ in PARTS.values())


def _run(rng: random.Random, rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    moved = {kind: [rng.gauss(m, s) for _ in range(rounds)] for kind, (m, s) in PARTS.items()}
    plain = [sum(v[i] for v in moved.values()) + rng.gauss(0, PLAIN_NOISE) for i in range(rounds)]
    return moved, plain


def _first(moved: dict[str, list[float]], plain: list[float]) -> tuple[str, str]:
    """The part named first: by the largest share, and by ``leading``."""
    largest = max(moved, key=lambda kind: sum(moved[kind]))
    return largest, leading(moved, plain, {kind: kind for kind in moved})[0][0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(44)
    print(f"{args.trials} trials per row; 95 % intervals")
    print()
    print(
        "| rounds | reproduced | build covered | rest covered | unexplained covered "
        "| same first part, largest share | same first part, leading() |"
    )
    print("|---|---|---|---|---|---|---|")
    for rounds in (3, 5, 10):
        reproduced, covered = 0, {"build": 0, "python": 0, "unexplained": 0}
        same_old = same_new = 0
        for _ in range(args.trials):
            moved, plain = _run(rng, rounds)
            other_moved, other_plain = _run(rng, rounds)
            old, new = _first(moved, plain)
            other_old, other_new = _first(other_moved, other_plain)
            same_old += old == other_old
            same_new += new == other_new
            whole = shares.mean(plain)
            if whole is None or whole[1] <= 0 <= whole[2]:
                continue
            reproduced += 1
            for kind in ("build", "python"):
                share = shares.ratio(moved[kind], plain)
                truth = PARTS[kind][0] / TRUE_WHOLE
                covered[kind] += share is not None and share[1] <= truth <= share[2]
            split = [sum(v[i] for v in moved.values()) for i in range(rounds)]
            left = shares.ratio([p - s for p, s in zip(plain, split, strict=True)], plain)
            covered["unexplained"] += left is not None and left[1] <= 0.0 <= left[2]
        cells = [f"{covered[k] / max(reproduced, 1):.1%}" for k in covered]
        print(
            f"| {rounds} | {reproduced / args.trials:.1%} | {' | '.join(cells)} "
            f"| {same_old / args.trials:.1%} | {same_new / args.trials:.1%} |"
        )


if __name__ == "__main__":
    main()
