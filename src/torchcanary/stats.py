"""Statistics for A/B timing and its explanation, in pure Python (the orchestrator has no
numpy or scipy); shared by the bench and explain sections.

Rank methods do the deciding, because timing noise is one-sided and heavy-tailed (a
preempted sample is slower, never faster) and means chase those tails. Each function names
its method; distributions are computed exactly where that is cheap and by the normal
approximation with tie correction otherwise.

Degenerate input is an error, never a number: NaN or infinite values raise ValueError
(NaN sorts nowhere, so a rank test over it would return a confident-looking p-value), and
``sample_problem`` says in words why a set of timings cannot be compared at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()


# --- location and spread -----------------------------------------------------------------


def _require_finite(values: Sequence[float], what: str) -> None:
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{what}: NaN or infinite values cannot be ranked or averaged")


def sample_problem(times: Sequence[float]) -> str | None:
    """Why these timings cannot be compared (None when they can): empty, NaN, inf, <= 0."""
    if not times:
        return "no samples"
    for label, bad in (
        ("NaN", lambda t: math.isnan(t)),
        ("infinite", lambda t: math.isinf(t)),
        ("zero or negative", lambda t: not math.isnan(t) and t <= 0),
    ):
        count = sum(1 for t in times if bad(t))
        if count:
            return f"{count} of {len(times)} samples are {label}: the timer is broken"
    return None


def median(values: Sequence[float]) -> float:
    _require_finite(values, "median")
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (the common 'type 7' definition)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def robust_cv(values: Sequence[float]) -> float:
    """Spread relative to the centre: 1.4826 * MAD / median (equals the CV for normal data)."""
    centre = median(values)
    if centre == 0:
        return math.inf
    return 1.4826 * median([abs(v - centre) for v in values]) / abs(centre)


# --- distributions -----------------------------------------------------------------------


def normal_two_sided_p(z: float) -> float:
    """P(|Z| >= |z|) by erfc, which keeps its precision far out (1 - cdf is 0 past z = 8)."""
    if math.isnan(z):
        raise ValueError("normal tail of NaN")
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


def normal_quantile(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def _continued_fraction_beta(a: float, b: float, x: float) -> float:
    """Lentz's method for the incomplete beta continued fraction."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return result


def regularized_beta(a: float, b: float, x: float, complement: float | None = None) -> float:
    """I_x(a, b). Pass ``complement`` = 1 - x when the caller can form it without rounding
    (the t tail near t = 0 has x within 1e-16 of 1, where ``1 - x`` keeps no digits)."""
    y = 1.0 - x if complement is None else complement
    if x <= 0:
        return 0.0
    if y <= 0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _continued_fraction_beta(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction_beta(b, a, y) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or not df > 0:
        raise ValueError(f"t tail needs a number and df > 0, not t={t}, df={df}")
    if math.isinf(t):
        return 0.0
    return regularized_beta(df / 2.0, 0.5, df / (df + t * t), complement=t * t / (df + t * t))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (p > 0.5), by bisection on the exact CDF; kept per
    (p, df), since a bench or a power simulation asks for the same few thousands of times."""
    if math.isinf(df):
        return normal_quantile(p)
    target = 2.0 * (1.0 - p)
    low, high = 0.0, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@lru_cache(maxsize=4096)
def t_critical(alpha: float, df: float) -> float:
    """The |t| whose two-sided tail is ``alpha``, exact for alphas far below 1e-16 too
    (``1 - alpha / 2`` rounds to 1 there, so quantiles of the CDF cannot reach them)."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must lie in (0, 1], not {alpha}")
    if math.isinf(df):
        return -normal_quantile(alpha / 2) if alpha / 2 > 1e-300 else 37.5
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > alpha and high < 1e300:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > alpha:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def detectable_shift(alpha: float, power: float, df: float) -> float:
    """The true effect, in standard errors, that a two-sided t-test at ``alpha`` on ``df``
    degrees of freedom detects with probability ``power``.

    Power of a t-test is a noncentral-t tail; its normal approximation (Johnson & Kotz:
    P(T' < c) ~ Phi((c (1 - 1/(4 df)) - delta) / sqrt(1 + c^2 / (2 df)))) keeps the extra
    spread that an estimated standard error adds at few degrees of freedom, which the
    textbook ``z_alpha + z_power`` leaves out (at 11 df and alpha 1e-4 it is 10% short).
    """
    critical = t_critical(alpha, df)
    if math.isinf(df):
        return critical + normal_quantile(power)
    return critical * (1 - 1 / (4 * df)) + normal_quantile(power) * math.sqrt(
        1 + critical * critical / (2 * df)
    )


def _regularized_gamma_upper(s: float, x: float) -> float:
    """Q(s, x) = 1 - P(s, x): series below s + 1, continued fraction above."""
    if x <= 0:
        return 1.0
    log_front = s * math.log(x) - x - math.lgamma(s)
    if x < s + 1:
        term = total = 1.0 / s
        k = s
        for _ in range(1000):
            k += 1
            term *= x / k
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - math.exp(log_front) * total)
    tiny = 1e-300
    b = x + 1 - s
    c, d = 1 / tiny, 1 / b
    result = d
    for i in range(1, 1000):
        an = -i * (i - s)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        result *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * result


def chi_square_upper_p(statistic: float, df: int) -> float:
    return _regularized_gamma_upper(df / 2.0, statistic / 2.0)


# --- ranks -------------------------------------------------------------------------------


def ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Mid-ranks (1-based) and the sizes of tied runs."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    ties = []
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2.0 + 1.0
        if end > start:
            ties.append(end - start + 1)
        start = end + 1
    return result, ties


@lru_cache(maxsize=64)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """How many of the 2**n sign patterns give each rank sum W+ (0 .. n(n+1)/2)."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for total, count in enumerate(counts):
            grown[total + rank] += count
        counts = grown
    return tuple(counts)


_EXACT_SIGNED_RANK_MAX_N = 60


def wilcoxon_signed_rank(differences: Sequence[float]) -> tuple[float, float]:
    """Two-sided Wilcoxon signed-rank test of "centred on 0"; returns (W+, p).

    Zeros are dropped (Wilcoxon's convention). Without ties and for n <= 60 the p-value is
    exact; otherwise the normal approximation with tie-corrected variance and a continuity
    correction.
    """
    _require_finite(differences, "signed-rank test")
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return 0.0, 1.0
    rank_values, ties = ranks([abs(d) for d in nonzero])
    w_plus = sum(r for r, d in zip(rank_values, nonzero, strict=True) if d > 0)
    total = n * (n + 1) / 2
    if not ties and n <= _EXACT_SIGNED_RANK_MAX_N:
        counts = _signed_rank_counts(n)
        low = min(w_plus, total - w_plus)
        tail = sum(counts[: int(low) + 1]) / 2**n
        return w_plus, min(1.0, 2 * tail)
    mean = total / 2
    variance = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in ties) / 48
    if variance <= 0:
        return w_plus, 1.0
    z = (abs(w_plus - mean) - 0.5) / math.sqrt(variance)
    return w_plus, normal_two_sided_p(max(z, 0.0))


def hodges_lehmann_one_sample(
    differences: Sequence[float], confidence: float
) -> tuple[float, float, float]:
    """Median of the Walsh averages, with Tukey's distribution-free confidence interval.

    The interval runs from the k-th smallest to the k-th largest Walsh average, k taken
    from the signed-rank null distribution: the interval that the signed-rank test inverts,
    so "the interval excludes 0" and "the test rejects" agree.
    """
    n = len(differences)
    if n == 0:
        raise ValueError("no differences")
    _require_finite(differences, "Hodges-Lehmann estimate")
    walsh = sorted((differences[i] + differences[j]) / 2 for i in range(n) for j in range(i, n))
    estimate = median(walsh)
    alpha = 1 - confidence
    m = len(walsh)
    if n <= _EXACT_SIGNED_RANK_MAX_N:
        counts = _signed_rank_counts(n)
        cumulative, k = 0, 0
        while k < len(counts) and (cumulative + counts[k]) / 2**n <= alpha / 2:
            cumulative += counts[k]
            k += 1
    else:
        z = normal_quantile(1 - alpha / 2)
        k = math.floor(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    if k < 1:  # too few values for this confidence: the interval is the whole range
        return estimate, -math.inf, math.inf
    return estimate, walsh[k - 1], walsh[m - k]


def mann_whitney_u(first: Sequence[float], second: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test; returns (U of ``first``, p).

    Normal approximation with the tie-corrected variance and a continuity correction,
    adequate from about 8 values a side (which every caller here has).
    """
    n1, n2 = len(first), len(second)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs values on both sides")
    _require_finite([*first, *second], "Mann-Whitney U")
    rank_values, ties = ranks(list(first) + list(second))
    u_first = sum(rank_values[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - sum(t**3 - t for t in ties) / (n * (n - 1)))
    if variance <= 0:
        return u_first, 1.0
    z = (abs(u_first - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return u_first, normal_two_sided_p(max(z, 0.0))


def winsorized(values: Sequence[float], clamp: float, floor: float = 0.0) -> list[float]:
    """Values pulled in to ``clamp`` robust spreads (1.4826 MAD, at least ``floor``) of
    their median: one wild value counts as unusually far, not as all of the spread."""
    centre = median(values)
    scale = max(1.4826 * median([abs(v - centre) for v in values]), floor)
    if scale <= 0:
        return list(values)
    return [min(max(v, centre - clamp * scale), centre + clamp * scale) for v in values]


def random_effects(
    estimates: Sequence[float], standard_errors: Sequence[float], clamp: float = 2.5
) -> tuple[float, float, float, float]:
    """DerSimonian-Laird random-effects combination: (pooled, its SE, tau^2, Cochran's Q p).

    Each estimate comes from one worker group. When groups agree within their own noise,
    tau^2 is 0 and this is the precision-weighted mean; when they disagree (one process
    was luckier than another), tau^2 grows and so does the pooled SE. Estimates are first
    pulled in to ``clamp`` robust spreads of their median (Huber-style winsorising), so
    one process that ran 25% slow counts as an unusually slow one, not as all of the spread;
    Cochran's Q p-value is computed on the raw estimates and says whether groups disagree.
    """
    raw = list(estimates)
    estimates = winsorized(raw, clamp, median(standard_errors))
    weights = [1 / max(se, 1e-12) ** 2 for se in standard_errors]
    total = sum(weights)
    fixed = sum(w * e for w, e in zip(weights, estimates, strict=True)) / total
    q = sum(w * (e - fixed) ** 2 for w, e in zip(weights, estimates, strict=True))
    df = len(estimates) - 1
    weight_spread = total - sum(w * w for w in weights) / total
    tau2 = max(0.0, (q - df) / weight_spread) if weight_spread > 0 else 0.0
    random_weights = [1 / (max(se, 1e-12) ** 2 + tau2) for se in standard_errors]
    pooled = sum(w * e for w, e in zip(random_weights, estimates, strict=True)) / sum(
        random_weights
    )
    raw_fixed = sum(w * e for w, e in zip(weights, raw, strict=True)) / total
    raw_q = sum(w * (e - raw_fixed) ** 2 for w, e in zip(weights, raw, strict=True))
    q_p = chi_square_upper_p(raw_q, df) if df > 0 else 1.0
    return pooled, math.sqrt(1 / sum(random_weights)), tau2, q_p


def trimmed_t(
    values: Sequence[float], confidence: float, trim: float = 0.1
) -> tuple[float, float, float, float, float, float]:
    """Yuen's trimmed one-sample t-test of "centred on 0".

    The lowest and highest ``g = floor(trim * n)`` values are dropped from the mean, the
    variance is the winsorized one, and the test has ``n - 2g - 1`` degrees of freedom, so
    one wild value among ten or more neither fakes nor hides a shift while the level stays
    what it says (pulling values in without paying in degrees of freedom does not).
    Below ten values ``g`` is 0 and this is Student's t.
    Returns (trimmed mean, p, low, high, standard error, degrees of freedom).
    """
    n = len(values)
    if n < 2:
        raise ValueError("a t-test needs at least two values")
    _require_finite(values, "trimmed t-test")
    scale = max(abs(v) for v in values) or 1.0  # keeps squares of huge values finite
    ordered = sorted(v / scale for v in values)
    g = math.floor(trim * n)
    kept = ordered[g : n - g]
    h = len(kept)
    mean = sum(kept) / h
    winsor = [kept[0]] * g + kept + [kept[-1]] * g
    winsor_mean = sum(winsor) / n
    variance = sum((v - winsor_mean) ** 2 for v in winsor) / (n - 1)
    se = math.sqrt(variance) / ((1 - 2 * g / n) * math.sqrt(n))
    df = h - 1.0
    if df < 1:
        return mean * scale, 1.0, -math.inf, math.inf, math.inf, 0.0
    if se == 0:
        p_value = 1.0 if mean == 0 else 0.0
        return mean * scale, p_value, mean * scale, mean * scale, 0.0, df
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return (
        mean * scale,
        t_two_sided_p(mean / se, df),
        (mean - half) * scale,
        (mean + half) * scale,
        se * scale,
        df,
    )


# --- many comparisons --------------------------------------------------------------------


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """BH-adjusted q-values, in input order: reject where q <= the chosen FDR.

    A p-value outside [0, 1] (or NaN) is a bug upstream; it raises rather than turn into a
    q-value that looks like evidence.
    """
    bad = [p for p in p_values if not 0.0 <= p <= 1.0]
    if bad:
        raise ValueError(f"p-values must lie in [0, 1], got {bad[:3]}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for position in range(m - 1, -1, -1):
        index = order[position]
        running = min(running, p_values[index] * m / (position + 1))
        adjusted[index] = min(1.0, running)
    return adjusted
