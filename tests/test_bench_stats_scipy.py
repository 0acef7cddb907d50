"""Every statistic of ``measure.stats`` against scipy, on generated data.

scipy and hypothesis are development dependencies only: the orchestrator computes these in
pure Python, and this file is where that arithmetic is held to a reference implementation.
The data include ties (values drawn from a few levels), the smallest sizes (1-3), huge and
tiny magnitudes; NaN must raise where scipy would hand back NaN.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from torchcanary import stats

scipy_stats = pytest.importorskip("scipy.stats")
special = pytest.importorskip("scipy.special")

EXAMPLES = settings(max_examples=150, deadline=None)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
tied = st.integers(min_value=-3, max_value=3).map(float)  # few levels: many ties
huge = st.floats(min_value=1e200, max_value=1e300) | st.floats(min_value=-1e300, max_value=-1e200)


def _close(ours: float, theirs: float, rel: float = 1e-7, abs_: float = 1e-12) -> bool:
    return math.isclose(ours, theirs, rel_tol=rel, abs_tol=abs_)


@EXAMPLES
@given(
    st.lists(finite | tied, min_size=1, max_size=40),
    st.lists(finite | tied, min_size=1, max_size=40),
)
def test_mann_whitney_matches_scipy_asymptotic_with_continuity(
    first: list[float], second: list[float]
) -> None:
    if len(set(first + second)) == 1:
        return  # no variance at all: scipy answers NaN, we answer p = 1
    u, p = stats.mann_whitney_u(first, second)
    theirs = scipy_stats.mannwhitneyu(
        first, second, alternative="two-sided", method="asymptotic", use_continuity=True
    )
    assert u == pytest.approx(len(first) * len(second) - theirs.statistic) or u == pytest.approx(
        theirs.statistic
    )
    assert _close(p, min(1.0, theirs.pvalue))


@EXAMPLES
@given(st.lists(finite.filter(lambda d: d != 0), min_size=1, max_size=25, unique=True))
def test_signed_rank_is_scipys_exact_test_without_ties(differences: list[float]) -> None:
    if len({abs(d) for d in differences}) < len(differences):
        return  # |d| ties: the exact distribution does not apply
    w_plus, p = stats.wilcoxon_signed_rank(differences)
    theirs = scipy_stats.wilcoxon(differences, method="exact")
    assert min(w_plus, len(differences) * (len(differences) + 1) / 2 - w_plus) == theirs.statistic
    assert _close(p, theirs.pvalue)


@EXAMPLES
@given(st.lists(tied, min_size=1, max_size=40))
def test_signed_rank_with_ties_and_zeros_matches_scipys_normal_approximation(
    differences: list[float],
) -> None:
    nonzero = [d for d in differences if d != 0]
    absolute = [abs(d) for d in nonzero]
    if len(nonzero) < 2 or len(set(absolute)) == len(absolute):
        return  # no ties: exact, covered above; nothing left: p = 1
    _w, p = stats.wilcoxon_signed_rank(differences)
    theirs = scipy_stats.wilcoxon(
        differences, zero_method="wilcox", correction=True, method="asymptotic"
    )
    assert _close(p, min(1.0, theirs.pvalue))


@EXAMPLES
@given(st.lists(finite | tied | huge, min_size=2, max_size=30))
def test_untrimmed_t_matches_scipys_student_t_even_for_huge_values(values: list[float]) -> None:
    if len(set(values)) == 1:
        return  # zero spread: scipy divides by zero
    mean, p, low, high, _se, _df = stats.trimmed_t(values, 0.95, trim=0.0)
    # scipy squares huge values into inf, so it gets them rescaled (t is scale-free).
    scale = max(abs(v) for v in values)
    theirs = scipy_stats.ttest_1samp([v / scale for v in values], 0.0)
    interval = theirs.confidence_interval(0.95)
    assert math.isfinite(p) and math.isfinite(low) and math.isfinite(high)
    assert _close(p, theirs.pvalue, rel=1e-6, abs_=1e-300)
    assert _close(mean / scale, sum(v / scale for v in values) / len(values), abs_=1e-12)
    assert _close(low / scale, interval.low, rel=1e-6, abs_=1e-12)
    assert _close(high / scale, interval.high, rel=1e-6, abs_=1e-12)


@EXAMPLES
@given(st.lists(finite | tied, min_size=2, max_size=30))
def test_yuen_trimmed_t_matches_scipys_trimmed_mean_and_winsorized_variance(
    values: list[float],
) -> None:
    np = pytest.importorskip("numpy")
    n = len(values)
    g = math.floor(0.1 * n)
    if len(set(values)) == 1 or n - 2 * g < 2:
        return
    mean, p, _low, _high, se, df = stats.trimmed_t(values, 0.95)
    trimmed_mean = scipy_stats.trim_mean(values, g / n) if g else sum(values) / n
    winsorized = scipy_stats.mstats.winsorize(np.asarray(values), limits=(g / n, g / n))
    their_se = math.sqrt(float(winsorized.var(ddof=1))) / ((1 - 2 * g / n) * math.sqrt(n))
    assert _close(mean, float(trimmed_mean), rel=1e-9, abs_=1e-9)
    assert df == n - 2 * g - 1
    if their_se > 0:
        assert _close(se, their_se, rel=1e-9)
        assert _close(p, 2 * scipy_stats.t.sf(abs(trimmed_mean) / their_se, df), rel=1e-6)


@EXAMPLES
@given(
    st.floats(min_value=-60, max_value=60),
    st.floats(min_value=1, max_value=200),
)
@example(t=1.192092896e-07, df=128.0)  # x = df / (df + t^2) rounds to 1: 1 - x keeps no digits
@example(t=1e-9, df=3.0)  # df + t^2 == df exactly
def test_t_tail_and_quantiles_match_scipy(t: float, df: float) -> None:
    assert _close(
        stats.t_two_sided_p(t, df), 2 * scipy_stats.t.sf(abs(t), df), rel=1e-8, abs_=1e-300
    )
    alpha = 10 ** -random.Random(t).uniform(0.5, 20)
    assert _close(stats.t_critical(alpha, df), scipy_stats.t.isf(alpha / 2, df), rel=1e-6)
    assert _close(stats.t_quantile(0.975, df), scipy_stats.t.ppf(0.975, df), rel=1e-8)


@EXAMPLES
@given(st.floats(min_value=-37, max_value=37))
def test_normal_tail_matches_scipy_far_out(z: float) -> None:
    assert _close(stats.normal_two_sided_p(z), 2 * scipy_stats.norm.sf(abs(z)), rel=1e-9, abs_=0)


@EXAMPLES
@given(
    st.floats(min_value=0.05, max_value=500),
    st.floats(min_value=0.05, max_value=500),
    st.floats(min_value=0, max_value=1),
)
def test_regularized_beta_matches_scipy(a: float, b: float, x: float) -> None:
    assert _close(stats.regularized_beta(a, b, x), special.betainc(a, b, x), rel=1e-8, abs_=1e-14)


@EXAMPLES
@given(st.floats(min_value=0, max_value=400), st.integers(min_value=1, max_value=60))
def test_chi_square_tail_matches_scipy(statistic: float, df: int) -> None:
    assert _close(
        stats.chi_square_upper_p(statistic, df),
        scipy_stats.chi2.sf(statistic, df),
        rel=1e-8,
        abs_=1e-300,
    )


@EXAMPLES
@given(
    st.lists(st.floats(min_value=0, max_value=1) | st.sampled_from([0.0, 0.01, 1.0]), max_size=50)
)
def test_benjamini_hochberg_matches_scipy(p_values: list[float]) -> None:
    ours = stats.benjamini_hochberg(p_values)
    if p_values:
        theirs = scipy_stats.false_discovery_control(p_values, method="bh")
        assert ours == pytest.approx(list(theirs), rel=1e-12, abs=1e-15)


@EXAMPLES
@given(st.lists(finite | tied, min_size=1, max_size=40))
def test_median_quantile_and_mad_match_scipy_and_numpy(values: list[float]) -> None:
    np = pytest.importorskip("numpy")
    assert stats.median(values) == pytest.approx(float(np.median(values)))
    for q in (0.05, 0.25, 0.75, 0.95):
        assert stats.quantile(values, q) == pytest.approx(float(np.quantile(values, q)), abs=1e-9)
    centre = stats.median(values)
    if abs(centre) > 1e-6:
        mad = scipy_stats.median_abs_deviation(values, scale="normal")
        assert stats.robust_cv(values) == pytest.approx(mad / abs(centre), rel=1e-3)


@EXAMPLES
@given(st.lists(finite | tied, min_size=1, max_size=30))
def test_hodges_lehmann_is_the_median_of_walsh_averages(differences: list[float]) -> None:
    np = pytest.importorskip("numpy")
    values = np.asarray(differences)
    walsh = (values[:, None] + values[None, :]) / 2
    upper = walsh[np.triu_indices(len(values))]
    estimate, low, high = stats.hodges_lehmann_one_sample(differences, 0.9)
    assert estimate == pytest.approx(float(np.median(upper)), abs=1e-9)
    assert low <= estimate <= high


def test_nan_raises_where_scipy_would_return_nan() -> None:
    with_nan = [0.1, math.nan, 0.3, 0.2]
    assert math.isnan(scipy_stats.ttest_1samp(with_nan, 0.0).pvalue)
    for call in (
        lambda: stats.trimmed_t(with_nan, 0.95),
        lambda: stats.wilcoxon_signed_rank(with_nan),
        lambda: stats.mann_whitney_u(with_nan, [1.0, 2.0]),
        lambda: stats.benjamini_hochberg(with_nan),
    ):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_smallest_samples_agree_with_scipy(n: int) -> None:
    values = [0.3, -0.1, 0.7][:n]
    assert stats.wilcoxon_signed_rank(values)[1] == pytest.approx(
        scipy_stats.wilcoxon(values, method="exact").pvalue
    )
    if n >= 2:
        ours = stats.trimmed_t(values, 0.95, trim=0.0)
        assert ours[1] == pytest.approx(scipy_stats.ttest_1samp(values, 0.0).pvalue)
    else:
        with pytest.raises(ValueError, match="at least two values"):
            stats.trimmed_t(values, 0.95, trim=0.0)
