"""canary.core.stats against independent implementations (statsmodels, scipy)."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binom, binomtest, norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from canary.core import stats

CASES = [(0, 10), (1, 10), (5, 10), (10, 10), (17, 50), (85, 100), (2, 100), (660, 1319), (1, 1), (0, 1)]


@pytest.mark.parametrize(("successes", "n"), CASES)
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99, 0.9975])
def test_wilson_matches_statsmodels(successes: int, n: int, confidence: float) -> None:
    low, high = stats.wilson_interval(successes, n, confidence)
    ref_low, ref_high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    assert low == pytest.approx(ref_low, abs=1e-12)
    assert high == pytest.approx(ref_high, abs=1e-12)
    assert 0.0 <= low <= successes / n <= high <= 1.0


def test_wilson_is_the_score_test_inversion() -> None:
    # T lies above the interval iff p_hat < T - z sqrt(T(1-T)/n): the "expected accuracy judged
    # with a Wilson lower limit" reading of the same gate.
    n, threshold, confidence = 100, 0.6, 0.95
    z = norm.ppf(0.5 + confidence / 2)
    for successes in range(n + 1):
        high = stats.wilson_interval(successes, n, confidence)[1]
        score_low = threshold - z * math.sqrt(threshold * (1 - threshold) / n)
        assert (high < threshold) == (successes / n < score_low)


def test_wilson_rejects_nonsense() -> None:
    assert stats.wilson_interval(0, 0, 0.95) == (0.0, 1.0)
    with pytest.raises(ValueError):
        stats.wilson_interval(3, 2, 0.95)
    with pytest.raises(ValueError):
        stats.wilson_interval(1, 2, 1.0)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (0, 1), (1, 0), (5, 5), (10, 2), (2, 10), (0, 12), (30, 17), (100, 70)])
def test_mcnemar_matches_statsmodels_and_scipy(b: int, c: int) -> None:
    p = stats.mcnemar_exact(b, c)
    ref = mcnemar([[40, b], [c, 40]], exact=True).pvalue
    assert p == pytest.approx(ref, rel=1e-12, abs=1e-15)
    if b + c:
        assert p == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


@pytest.mark.parametrize("n", [0, 1, 7, 40, 301])
def test_binomial_cdf_half_matches_scipy(n: int) -> None:
    for k in range(-1, n + 2):
        assert stats.binomial_cdf_half(k, n) == pytest.approx(binom.cdf(k, n, 0.5), rel=1e-12, abs=1e-300)


def test_absolute_look_fails_a_collapsed_cell_early() -> None:
    # 25 questions, 0 right, threshold 0.5, 4 looks: clearly below.
    look = stats.absolute_look(0, 25, 100, 0.5, 0.95, 4)
    assert look.decision == "fail"
    assert look.wilson_high < 0.5
    assert look.confidence == pytest.approx(1 - 0.05 / 4)


def test_absolute_look_continues_when_uncertain_and_decides_at_the_end() -> None:
    assert stats.absolute_look(13, 25, 100, 0.55, 0.95, 4).decision == "continue"
    assert stats.absolute_look(50, 100, 100, 0.55, 0.95, 4).decision == "pass"
    assert stats.absolute_look(40, 100, 100, 0.55, 0.95, 4).decision == "fail"


def test_absolute_look_passes_early_only_with_room_below() -> None:
    # 24/25 right vs a low floor: the Bonferroni lower bound already clears it.
    look = stats.absolute_look(24, 25, 100, 0.5, 0.95, 4)
    assert look.decision == "pass"
    assert look.wilson_low >= 0.5


def test_absolute_look_curtailment_is_exact() -> None:
    # 5 questions left: all wrong cannot pull the final upper bound below the threshold.
    look = stats.absolute_look(60, 95, 100, 0.6, 0.95, 4)
    worst_final = stats.wilson_interval(60, 100, stats.look_confidence(0.95, 4))[1]
    assert worst_final >= 0.6
    assert look.decision == "pass"
    assert "curtailed" in look.reason


def test_absolute_look_single_look_never_continues() -> None:
    assert stats.absolute_look(30, 100, 100, 0.4, 0.95, 1).decision in ("pass", "fail")
    with pytest.raises(ValueError):
        stats.absolute_look(5, 4, 100, 0.5, 0.95, 1)


def test_paired_look() -> None:
    assert stats.paired_look(12, 0, 50, 0.01, 4).decision == "fail"  # p = 2/4096 < 0.0025
    assert stats.paired_look(0, 12, 50, 0.01, 4).decision == "continue"  # P/D better: never fails
    assert stats.paired_look(0, 12, 0, 0.01, 4).decision == "pass"
    assert stats.paired_look(3, 1, 0, 0.01, 1).decision == "pass"
    assert stats.paired_look(0, 0, 2, 0.01, 4).decision == "pass"  # 2 more cannot reach p < 0.0025
    assert stats.paired_look(5, 5, 100, 0.01, 4).decision == "continue"


def test_bonferroni_keeps_the_healthy_false_fail_rate_bounded() -> None:
    # Exact: probability that a cell with true accuracy == threshold fails at any look.
    threshold, confidence, limit, batch = 0.6, 0.95, 100, 25
    looks = stats.planned_looks(limit, batch, early_stop=True)
    level = stats.look_confidence(confidence, looks)
    fail_at = {
        seen: max((k for k in range(seen + 1) if stats.wilson_interval(k, seen, level)[1] < threshold), default=-1)
        for seen in range(batch, limit + 1, batch)
    }
    p_fail = sum(binom.cdf(fail_at[seen], seen, threshold) for seen in fail_at)  # union bound
    assert p_fail <= (1 - confidence) / 2 + 1e-9


def test_planned_looks() -> None:
    assert stats.planned_looks(100, 25, True) == 4
    assert stats.planned_looks(101, 25, True) == 5
    assert stats.planned_looks(100, 25, False) == 1
