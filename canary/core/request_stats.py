"""Per-request statistics for regressions: Mann-Whitney U, the Hodges-Lehmann shift and its
interval, and family-wise control over every comparison of a run (Kayenta-style judgement).

Stdlib only, like canary/core/stats.py; tests check every function against scipy.

Samples
-------
One value per successful measured request: TTFT, E2E and the request's mean inter-token latency
(``itl_mean``). Token gaps of one request are not independent of each other (one slow step slows
all of them), so pooling every gap would break the independence the rank test assumes; the
per-request mean keeps one observation per request.

The test
--------
For each metric, baseline sample x (the same cell on the baseline image) and candidate sample y:

- Mann-Whitney U of y against x, one-sided "candidate larger" (every metric here is a latency:
  larger is worse), normal approximation with tie correction and continuity correction. This is
  ``scipy.stats.mannwhitneyu(y, x, alternative="greater", method="asymptotic")``. The samples
  are large (tens to hundreds of requests), where the approximation is accurate.
- Hodges-Lehmann shift: the median of all n*m differences y_j - x_i, with the distribution-free
  confidence interval that inverts the two-sided U test (Lehmann; Hollander & Wolfe, ch. 4): the
  C-th smallest and the (nm + 1 - C)-th smallest difference with
  C = floor(nm/2 - z * sd(U)), sd with the tie correction. The differences are never
  materialised: the k-th smallest is found by bisection on the value with an O(n log m) count.
- A metric regresses when the family-adjusted p-value is below alpha AND the HL shift, relative
  to the baseline median, exceeds the practical tolerance (a significant 0.5% shift on thousands
  of requests is not a regression worth a page).
- Fewer than ``min_samples`` on either side: inconclusive, never a pass.

Family-wise control: Holm
-------------------------
A run tests every compared cell x metric. We use Holm's step-down procedure, which controls the
family-wise error rate (the chance of even one false alarm in a run) at alpha under any dependence
between the tests; the metrics of one cell are strongly dependent (a slow step raises TTFT, ITL
and E2E together), which rules out methods that assume independence. Benjamini-Hochberg controls
the false discovery rate instead: with regressions present it tolerates a share of false alarms
among the alarms, which suits screening thousands of hypotheses, not a nightly gate whose promise
is "a clean run raises nothing". Holm is uniformly more powerful than Bonferroni at the same
guarantee. ``benjamini_hochberg`` is here too, for comparison and reports, but no gate uses it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist, median
from typing import Literal

Outcome = Literal["regression", "no-regression", "inconclusive"]

_NORMAL = NormalDist()


@dataclass(frozen=True)
class MannWhitney:
    """U statistic of the first sample and the p-value of the chosen alternative."""

    u: float
    p_value: float
    z: float


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Mid-ranks (1-based) of values in their original order, and the sizes of tie groups."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mid = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = mid
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _check_finite(name: str, values: Sequence[float]) -> None:
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{name}: {len(bad)} non-finite value(s), e.g. {bad[0]!r}")


def u_sd(n: int, m: int, ties: Sequence[int]) -> float:
    """Standard deviation of U under the null, with the tie correction."""
    total = n + m
    tie_term = sum(t**3 - t for t in ties) / (total * (total - 1)) if total > 1 else 0.0
    return math.sqrt(n * m / 12.0 * ((total + 1) - tie_term))


def mann_whitney(
    first: Sequence[float], second: Sequence[float], alternative: Literal["greater", "less", "two-sided"] = "greater"
) -> MannWhitney:
    """Mann-Whitney U of `first` against `second` (asymptotic, tie- and continuity-corrected).

    "greater": first tends to be larger than second. Matches scipy.stats.mannwhitneyu(first,
    second, alternative=..., method="asymptotic", use_continuity=True).
    """
    n, m = len(first), len(second)
    if n == 0 or m == 0:
        raise ValueError(f"mann_whitney needs two non-empty samples, got sizes {n} and {m}")
    _check_finite("first sample", first)
    _check_finite("second sample", second)
    ranks, ties = _ranks([*first, *second])
    u = sum(ranks[:n]) - n * (n + 1) / 2.0
    mean = n * m / 2.0
    sd = u_sd(n, m, ties)
    if sd == 0.0:  # every value equal: no evidence either way
        return MannWhitney(u=u, p_value=1.0, z=0.0)
    if alternative == "greater":
        z = (u - mean - 0.5) / sd
        p = 1.0 - _NORMAL.cdf(z)
    elif alternative == "less":
        z = (u - mean + 0.5) / sd
        p = _NORMAL.cdf(z)
    else:
        z = (abs(u - mean) - 0.5) / sd
        p = min(1.0, 2.0 * (1.0 - _NORMAL.cdf(z)))
    return MannWhitney(u=u, p_value=min(1.0, max(0.0, p)), z=z)


def _count_le(shift: float, baseline: Sequence[float], candidate: Sequence[float]) -> int:
    """How many differences candidate_j - baseline_i are <= shift (both sorted)."""
    return sum(bisect_right(candidate, x + shift) for x in baseline)


def kth_difference(k: int, baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """The k-th smallest (1-based) of the n*m differences candidate_j - baseline_i.

    Both sequences must be sorted ascending.
    """
    n, m = len(baseline), len(candidate)
    if not 1 <= k <= n * m:
        raise ValueError(f"k={k} outside 1..{n * m}")
    lo = candidate[0] - baseline[-1]
    hi = candidate[-1] - baseline[0]
    pad = (abs(lo) + abs(hi)) * 1e-9 + 1e-300  # x + shift rounds: keep every difference inside
    lo, hi = lo - pad, hi + pad
    # invariant: count(<= lo) < k <= count(<= hi)
    for _ in range(200):
        mid = lo + (hi - lo) / 2.0
        if mid <= lo or mid >= hi:
            break
        if _count_le(mid, baseline, candidate) >= k:
            hi = mid
        else:
            lo = mid
    # hi is within one float step of the answer: snap it to the largest actual difference <= hi
    best = -math.inf
    for x in baseline:
        j = bisect_right(candidate, x + hi) - 1
        if j >= 0:
            best = max(best, candidate[j] - x)
    return best if math.isfinite(best) else hi


@dataclass(frozen=True)
class Shift:
    """Hodges-Lehmann shift of candidate over baseline and its confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float


def hodges_lehmann(baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95) -> Shift:
    """HL estimate of candidate - baseline and the interval from inverting the two-sided U test."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    n, m = len(baseline), len(candidate)
    if n == 0 or m == 0:
        raise ValueError(f"hodges_lehmann needs two non-empty samples, got sizes {n} and {m}")
    _check_finite("baseline sample", baseline)
    _check_finite("candidate sample", candidate)
    xs, ys = sorted(baseline), sorted(candidate)
    total = n * m
    lower_mid, upper_mid = (total + 1) // 2, (total + 2) // 2
    estimate = (kth_difference(lower_mid, xs, ys) + kth_difference(upper_mid, xs, ys)) / 2.0
    _, ties = _ranks([*xs, *ys])
    z = _NORMAL.inv_cdf(0.5 + confidence / 2.0)
    c = math.floor(total / 2.0 - z * u_sd(n, m, ties))
    if c < 1:  # too few samples for this confidence: the interval is unbounded
        return Shift(estimate=estimate, low=-math.inf, high=math.inf, confidence=confidence)
    low = kth_difference(c, xs, ys)
    high = kth_difference(total + 1 - c, xs, ys)
    return Shift(estimate=estimate, low=low, high=high, confidence=confidence)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (statsmodels multipletests 'holm')."""
    count = len(p_values)
    order = sorted(range(count), key=lambda i: p_values[i])
    adjusted = [0.0] * count
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (count - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values, in the input order (statsmodels 'fdr_bh')."""
    count = len(p_values)
    order = sorted(range(count), key=lambda i: p_values[i], reverse=True)
    adjusted = [0.0] * count
    running = 1.0
    for position, index in enumerate(order):
        rank = count - position
        running = min(running, p_values[index] * count / rank)
        adjusted[index] = min(1.0, running)
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """One metric of one cell: candidate vs baseline per-request samples (before family control)."""

    metric: str
    n_baseline: int
    n_candidate: int
    baseline_median: float
    candidate_median: float
    p_value: float
    shift: Shift | None

    @property
    def relative_shift(self) -> float:
        """HL shift as a fraction of the baseline median (nan when it cannot be computed)."""
        if self.shift is None or self.baseline_median == 0:
            return math.nan
        return self.shift.estimate / abs(self.baseline_median)


def compare_samples(
    metric: str, baseline: Sequence[float], candidate: Sequence[float], *, confidence: float, min_samples: int
) -> Comparison:
    """The U test and HL shift of one metric; p = 1 and no shift with too few samples."""
    if len(baseline) < min_samples or len(candidate) < min_samples:
        return Comparison(
            metric=metric,
            n_baseline=len(baseline),
            n_candidate=len(candidate),
            baseline_median=median(baseline) if baseline else math.nan,
            candidate_median=median(candidate) if candidate else math.nan,
            p_value=1.0,
            shift=None,
        )
    test = mann_whitney(candidate, baseline, "greater")
    return Comparison(
        metric=metric,
        n_baseline=len(baseline),
        n_candidate=len(candidate),
        baseline_median=median(baseline),
        candidate_median=median(candidate),
        p_value=test.p_value,
        shift=hodges_lehmann(baseline, candidate, confidence),
    )


def judge(comparison: Comparison, adjusted_p: float, *, alpha: float, tolerance: float, min_samples: int) -> Outcome:
    """regression / no-regression / inconclusive for one comparison after family control."""
    if comparison.n_baseline < min_samples or comparison.n_candidate < min_samples or comparison.shift is None:
        return "inconclusive"
    relative = comparison.relative_shift
    if not math.isfinite(relative):
        return "inconclusive"
    return "regression" if adjusted_p < alpha and relative > tolerance else "no-regression"


def describe(comparison: Comparison, adjusted_p: float, outcome: Outcome, min_samples: int) -> str:
    """One sentence with the numbers."""
    if comparison.shift is None:
        return (
            f"{comparison.metric}: inconclusive, {comparison.n_candidate} candidate and {comparison.n_baseline} "
            f"baseline requests (need >= {min_samples} each)"
        )
    s = comparison.shift
    base = abs(comparison.baseline_median) or math.nan
    return (
        f"{comparison.metric}: HL shift {s.estimate * 1e3:+.2f} ms ({s.estimate / base:+.1%}), "
        f"{s.confidence:.0%} CI [{s.low * 1e3:+.2f}, {s.high * 1e3:+.2f}] ms, "
        f"U-test p={comparison.p_value:.2g} (Holm {adjusted_p:.2g}), n={comparison.n_candidate}/"
        f"{comparison.n_baseline}: {outcome}"
    )
