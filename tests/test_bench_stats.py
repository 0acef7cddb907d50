"""The bench statistics against answers worked out by hand or known from tables."""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys

import pytest

from torchcanary import stats


def test_mann_whitney_matches_a_hand_computed_case_without_ties() -> None:
    # x = 1,2,3 below every y = 4..7: U = 0. Normal approximation: mean n1*n2/2 = 6,
    # variance n1*n2*(N+1)/12 = 8, z = (6 - 0.5)/sqrt(8) = 1.9445, two-sided p = 0.0518.
    u, p = stats.mann_whitney_u([1, 2, 3], [4, 5, 6, 7])
    assert u == 0
    assert p == pytest.approx(0.05183, abs=1e-4)


def test_mann_whitney_corrects_its_variance_for_ties() -> None:
    # Pooled 1,2,2,3 | 2,3,4,5: mid-ranks x = 1, 3, 3, 5.5 -> R1 = 12.5, U = 2.5. Ties of
    # sizes 3 (the 2s) and 2 (the 3s): variance = 16/12 * (9 - (24 + 6)/56) = 11.286;
    # z = (|2.5 - 8| - 0.5)/sqrt(11.286) = 1.4883, p = 0.1367.
    u, p = stats.mann_whitney_u([1, 2, 2, 3], [2, 3, 4, 5])
    assert u == pytest.approx(2.5)
    assert p == pytest.approx(0.1367, abs=1e-3)


def test_signed_rank_is_exact_for_small_samples() -> None:
    # All five differences positive: W+ = 15, P = 2 * (1/32) = 0.0625.
    assert stats.wilcoxon_signed_rank([1, 2, 3, 4, 5]) == (15.0, 0.0625)
    # Ranks of |d|: the two negatives have ranks 1 and 2, so W- = 3; P(W- <= 3) for n = 8 is
    # 5/256, two-sided 0.0390625.
    w_plus, p = stats.wilcoxon_signed_rank([1.5, -0.5, 2.5, 3.5, -1.2, 4.1, 5.2, 2.2])
    assert w_plus == 33 and p == pytest.approx(10 / 256)


def test_signed_rank_drops_zeros_and_says_nothing_about_all_zero_input() -> None:
    assert stats.wilcoxon_signed_rank([0.0, 0.0, 0.0]) == (0.0, 1.0)
    assert stats.wilcoxon_signed_rank([0.0, 1, 2, 3, 4, 5])[1] == 0.0625


def test_benjamini_hochberg_on_a_known_vector() -> None:
    # Sorted p: 0.005, 0.01, 0.03, 0.04 with m = 4 -> p*m/rank = 0.02, 0.02, 0.04, 0.04.
    assert stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx(
        [0.02, 0.04, 0.04, 0.02]
    )
    # Monotone step-up: a large p late in the order cannot lower earlier q-values.
    assert stats.benjamini_hochberg([0.9, 0.001]) == pytest.approx([0.9, 0.002])


def test_distribution_functions_match_their_tables() -> None:
    assert stats.t_two_sided_p(2.0, 10) == pytest.approx(0.07339, abs=1e-4)
    assert stats.t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-3)
    assert stats.chi_square_upper_p(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert stats.chi_square_upper_p(9.488, 4) == pytest.approx(0.05, abs=1e-3)


def test_random_effects_pools_agreeing_groups_and_widens_for_disagreeing_ones() -> None:
    # Equal SEs of 0.01 and identical estimates: tau^2 = 0, SE = 0.01/sqrt(3).
    pooled, se, tau2, q_p = stats.random_effects([0.02, 0.02, 0.02], [0.01] * 3)
    assert pooled == pytest.approx(0.02) and tau2 == 0 and q_p == pytest.approx(1.0)
    assert se == pytest.approx(0.01 / math.sqrt(3))
    # Estimates 0, 0.1, 0.2: weights 1e4 each, Q = 1e4 * 0.02 = 200, df 2, spread
    # 3e4 - 3e8/3e4 = 2e4, tau^2 = (200 - 2)/2e4 = 0.0099; SE = sqrt((1e-4 + 0.0099)/3).
    pooled, se, tau2, q_p = stats.random_effects([0.0, 0.1, 0.2], [0.01] * 3)
    assert pooled == pytest.approx(0.1)
    assert tau2 == pytest.approx(0.0099)
    assert se == pytest.approx(math.sqrt(0.01 / 3))
    assert q_p < 1e-10


def test_hodges_lehmann_interval_covers_the_true_shift_as_often_as_it_promises() -> None:
    rng = random.Random(7)
    truth, trials, covered = math.log(1.03), 300, 0
    for _ in range(trials):
        # Heavy-tailed noise like a busy machine's: mostly tight, sometimes far off.
        diffs = [
            truth
            + rng.gauss(0, 0.02)
            + (rng.expovariate(5) if rng.random() < 0.1 else 0) * rng.choice((-1, 1))
            for _ in range(40)
        ]
        _estimate, low, high = stats.hodges_lehmann_one_sample(diffs, 0.9)
        covered += low <= truth <= high
    assert 0.85 <= covered / trials <= 0.95


def test_signed_rank_false_alarm_rate_is_near_its_level_under_the_null() -> None:
    rng = random.Random(11)
    trials = 400
    alarms = sum(
        stats.wilcoxon_signed_rank([rng.gauss(0, 1) for _ in range(30)])[1] <= 0.05
        for _ in range(trials)
    )
    assert 0.02 <= alarms / trials <= 0.08


def test_hodges_lehmann_interval_is_unbounded_when_too_few_values_for_the_level() -> None:
    estimate, low, high = stats.hodges_lehmann_one_sample([0.1, 0.2, 0.3], 0.99)
    assert estimate == pytest.approx(0.2)
    assert (low, high) == (-math.inf, math.inf)


def test_robust_spread_ignores_one_wild_value() -> None:
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0]
    assert stats.robust_cv([*steady, 50.0]) < 0.05


def test_random_effects_pulls_one_wild_group_in_but_still_reports_the_disagreement() -> None:
    # Median 0 and MAD 0, so the spread is the groups' own SE (0.01): the wild 1.0 is
    # pulled in to 2.5 * 0.01 before pooling, while Q on the raw values flags the group.
    pooled, _se, _tau2, q_p = stats.random_effects([0, 0, 0, 0, 0, 1.0], [0.01] * 6)
    assert 0 < pooled < 0.01
    assert q_p < 1e-10


def test_normal_tails_keep_their_precision_far_out() -> None:
    # 1 - cdf is exactly 0 beyond z of about 8; erfc gives P(|Z| >= 10) = 1.5e-23.
    assert stats.normal_two_sided_p(10.0) == pytest.approx(1.5239706e-23, rel=1e-6)
    assert 0 < stats.normal_two_sided_p(-30.0) < 1e-190
    assert stats.normal_two_sided_p(0.0) == 1.0


def test_benjamini_hochberg_refuses_p_values_outside_zero_to_one() -> None:
    for bad in ([-0.1, 1.5], [0.2, math.nan], [1.0000001]):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            stats.benjamini_hochberg(bad)
    assert stats.benjamini_hochberg([]) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: stats.wilcoxon_signed_rank([0.1, math.nan, 0.3]),
        lambda: stats.mann_whitney_u([1.0, math.inf], [2.0, 3.0]),
        lambda: stats.mann_whitney_u([], [2.0, 3.0]),
        lambda: stats.hodges_lehmann_one_sample([math.nan, 1.0], 0.9),
        lambda: stats.median([1.0, math.nan, 2.0]),
        lambda: stats.trimmed_t([1.0, -math.inf, 2.0], 0.9),
    ],
    ids=["signed-rank", "mann-whitney", "mann-whitney-empty", "hl", "median", "yuen"],
)
def test_degenerate_input_raises_instead_of_giving_a_p_value(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_sample_problems_are_named() -> None:
    assert stats.sample_problem([1e-3, 2e-3]) is None
    assert stats.sample_problem([]) == "no samples"
    assert "1 of 3 samples are NaN" in str(stats.sample_problem([1.0, math.nan, 2.0]))
    assert "infinite" in str(stats.sample_problem([1.0, math.inf]))
    assert "zero or negative" in str(stats.sample_problem([1.0, 0.0, -2.0]))


def test_yuen_trims_one_wild_group_in_ten_and_pays_for_it_in_degrees_of_freedom() -> None:
    values = [0.05, 0.06, 0.04, 0.05, 0.055, 0.045, 0.05, 0.052, 0.048, 0.9]
    mean, p, low, high, _se, df = stats.trimmed_t(values, 0.99)
    assert df == 7  # 10 values, 1 trimmed at each end
    assert mean == pytest.approx(sum(sorted(values)[1:-1]) / 8)
    assert p < 1e-5 and low < mean < high
    # Under ten values nothing is trimmed: it is Student's t.
    few = [0.1, 0.2, 0.15, 0.3]
    mean, p, low, high, se, df = stats.trimmed_t(few, 0.95)
    student_se = statistics.stdev(few) / math.sqrt(len(few))
    half = stats.t_quantile(0.975, 3) * student_se
    assert (mean, se, df) == pytest.approx((statistics.mean(few), student_se, 3))
    assert (low, high) == pytest.approx((mean - half, mean + half))


def test_detectable_shift_uses_the_t_tail_at_tiny_levels() -> None:
    # The quantile of 1 - 1e-20 rounds to 1 in floating point; the tail itself does not.
    assert stats.t_two_sided_p(stats.t_critical(1e-20, 11), 11) == pytest.approx(1e-20, rel=1e-6)
    assert stats.detectable_shift(0.05, 0.9, math.inf) == pytest.approx(1.96 + 1.2816, abs=1e-3)


def test_the_orchestrator_statistics_need_neither_scipy_nor_hypothesis() -> None:
    # Those are the tests' references only; a user's install has neither.
    code = (
        "import sys, torchcanary.cli, torchcanary.bench.compare, torchcanary.bench.section; "
        "print(sorted(m for m in ('scipy', 'hypothesis', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
