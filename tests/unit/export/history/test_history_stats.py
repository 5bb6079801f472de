"""canary.core.request_stats against scipy and statsmodels: Mann-Whitney U, Hodges-Lehmann, Holm, BH."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from canary.core.request_stats import (
    benjamini_hochberg,
    compare_samples,
    hodges_lehmann,
    holm,
    judge,
    kth_difference,
    mann_whitney,
)

RNG = np.random.default_rng(20261130)


def _pairs(count: int) -> list[tuple[list[float], list[float]]]:
    out = []
    for i in range(count):
        n, m = (int(v) for v in RNG.integers(3, 60, 2))
        if i % 3 == 0:  # heavy ties
            x = np.round(RNG.normal(0, 1, n), 1)
            y = np.round(RNG.normal(0.4, 1, m), 1)
        elif i % 3 == 1:  # latency-like
            x = RNG.lognormal(-2.0, 0.3, n)
            y = RNG.lognormal(-1.9, 0.3, m)
        else:
            x = RNG.integers(0, 5, n).astype(float)  # few distinct values
            y = RNG.integers(0, 6, m).astype(float)
        out.append((x.tolist(), y.tolist()))
    return out


PAIRS = _pairs(60)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_mann_whitney_matches_scipy(alternative: str) -> None:
    for x, y in PAIRS:
        ours = mann_whitney(y, x, alternative)  # type: ignore[arg-type]
        ref = stats.mannwhitneyu(y, x, alternative=alternative, method="asymptotic", use_continuity=True)
        assert ours.u == pytest.approx(ref.statistic, abs=1e-9)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)


def test_mann_whitney_detects_a_shift_and_not_its_absence() -> None:
    base = RNG.lognormal(-2.0, 0.2, 200).tolist()
    slower = (np.array(RNG.lognormal(-2.0, 0.2, 200)) * 1.15).tolist()
    same = RNG.lognormal(-2.0, 0.2, 200).tolist()
    assert mann_whitney(slower, base).p_value < 1e-6
    assert mann_whitney(same, base).p_value > 0.01
    assert mann_whitney(base, slower).p_value > 0.99  # one-sided: faster is no evidence of slower


def test_mann_whitney_all_equal_is_no_evidence() -> None:
    assert mann_whitney([1.0] * 5, [1.0] * 7).p_value == 1.0


def test_mann_whitney_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney([], [1.0])
    with pytest.raises(ValueError, match="second sample: 1 non-finite"):
        mann_whitney([1.0], [math.nan])


def test_kth_difference_is_the_sorted_pairwise_difference() -> None:
    for x, y in PAIRS:
        diffs = np.sort(np.subtract.outer(np.array(y), np.array(x)).ravel())
        xs, ys = sorted(x), sorted(y)
        for k in {1, 2, len(diffs) // 3 + 1, len(diffs) // 2 + 1, len(diffs)}:
            assert kth_difference(k, xs, ys) == pytest.approx(diffs[k - 1], abs=1e-12)
    with pytest.raises(ValueError, match="outside"):
        kth_difference(0, [1.0], [2.0])


def test_hodges_lehmann_estimate_is_the_median_of_differences() -> None:
    for x, y in PAIRS:
        expected = float(np.median(np.subtract.outer(np.array(y), np.array(x))))
        assert hodges_lehmann(x, y).estimate == pytest.approx(expected, abs=1e-12)


def test_hodges_lehmann_interval_inverts_the_scipy_u_test() -> None:
    """Lehmann's interval is the set of shifts d for which the two-sided U test of (y - d) vs x does
    not reject at 1 - confidence: just inside each end scipy's p-value is >= alpha, just outside < alpha."""
    confidence, alpha = 0.95, 0.05
    checked = 0
    for _ in range(25):
        x = RNG.lognormal(-2.0, 0.3, 40)
        y = RNG.lognormal(-1.9, 0.3, 35)
        shift = hodges_lehmann(x.tolist(), y.tolist(), confidence)
        assert shift.low <= shift.estimate <= shift.high

        def p(d: float, x: np.ndarray = x, y: np.ndarray = y) -> float:
            # continuity correction off: the interval's normal quantile has none either
            return float(stats.mannwhitneyu(y - d, x, method="asymptotic", use_continuity=False).pvalue)

        eps = 1e-9
        assert p(shift.low + eps) >= alpha - 0.01
        assert p(shift.high - eps) >= alpha - 0.01
        assert p(shift.low - 1e-3) < alpha + 0.01
        assert p(shift.high + 1e-3) < alpha + 0.01
        checked += 1
    assert checked == 25


def test_hodges_lehmann_interval_covers_the_true_shift() -> None:
    """Coverage of the 90% interval over repeated samples with a known shift of 0.01 s."""
    covered = 0
    trials = 200
    for _ in range(trials):
        x = RNG.exponential(0.05, 30)
        y = RNG.exponential(0.05, 30) + 0.01
        s = hodges_lehmann(x.tolist(), y.tolist(), 0.90)
        covered += s.low <= 0.01 <= s.high
    assert 0.84 <= covered / trials <= 0.96


def test_hodges_lehmann_small_samples_give_an_unbounded_interval() -> None:
    shift = hodges_lehmann([1.0, 2.0], [3.0], 0.99)
    assert shift.estimate == 1.5
    assert (shift.low, shift.high) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="confidence"):
        hodges_lehmann([1.0], [2.0], 1.0)


def test_holm_and_bh_match_statsmodels() -> None:
    for _ in range(50):
        p = RNG.uniform(0, 0.2, int(RNG.integers(1, 30))).tolist()
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1].tolist(), abs=1e-12)
        assert benjamini_hochberg(p) == pytest.approx(multipletests(p, method="fdr_bh")[1].tolist(), abs=1e-12)


def test_holm_controls_the_family() -> None:
    """Alone significant, not after Holm over ten tests: the family decides."""
    p = [0.02] + [0.5] * 9
    assert holm(p)[0] == pytest.approx(0.2)
    assert holm([0.001, 0.02])[1] == pytest.approx(0.02)


def test_too_few_samples_are_inconclusive_never_a_pass() -> None:
    few = compare_samples("ttft_s", [0.1] * 5, [0.1] * 5, confidence=0.95, min_samples=20)
    assert few.shift is None and few.p_value == 1.0
    assert judge(few, 1.0, alpha=0.05, tolerance=0.1, min_samples=20) == "inconclusive"
    none = compare_samples("ttft_s", [], [], confidence=0.95, min_samples=20)
    assert judge(none, 1.0, alpha=0.05, tolerance=0.1, min_samples=20) == "inconclusive"


def test_judge_needs_significance_and_size() -> None:
    base = RNG.lognormal(-2.0, 0.1, 400).tolist()
    small = (np.array(RNG.lognormal(-2.0, 0.1, 400)) * 1.04).tolist()  # significant, 4%: not a regression
    big = (np.array(RNG.lognormal(-2.0, 0.1, 400)) * 1.3).tolist()
    c_small = compare_samples("e2e_s", base, small, confidence=0.95, min_samples=20)
    c_big = compare_samples("e2e_s", base, big, confidence=0.95, min_samples=20)
    assert c_small.p_value < 0.05
    assert judge(c_small, c_small.p_value, alpha=0.05, tolerance=0.1, min_samples=20) == "no-regression"
    assert judge(c_big, c_big.p_value, alpha=0.05, tolerance=0.1, min_samples=20) == "regression"
    assert c_big.relative_shift == pytest.approx(0.3, abs=0.05)
    # the same shift, not significant after family control: no regression
    assert judge(c_big, 0.2, alpha=0.05, tolerance=0.1, min_samples=20) == "no-regression"
