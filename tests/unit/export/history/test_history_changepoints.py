"""E-Divisive means (canary.export.history.changepoints): the statistic against its definition, and the
behaviour Matteson & James (2014) describe: a mean shift is found where it happens, a change of
spread with the same mean is found too (energy distance compares distributions), several changes
are found by hierarchical splitting, and a stationary series gives none."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from canary.export.history.changepoints import (
    e_divisive,
    energy_statistics,
    permutation_p_value,
    worse_fraction,
)


def _direct_q(z: list[float], tau: int) -> float:
    """Q(tau) written out from the paper's definition, alpha = 1."""
    left, right = z[:tau], z[tau:]
    n, m = len(left), len(right)
    between = sum(abs(a - b) for a in left for b in right) * 2.0 / (n * m)
    within_l = sum(abs(a - b) for a, b in itertools.combinations(left, 2)) / (n * (n - 1) / 2)
    within_r = sum(abs(a - b) for a, b in itertools.combinations(right, 2)) / (m * (m - 1) / 2)
    return n * m / (n + m) * (between - within_l - within_r)


def test_energy_statistic_matches_the_definition() -> None:
    rng = random.Random(1)
    for size in (6, 7, 15, 30):
        z = [rng.gauss(0, 1) for _ in range(size)]
        ours = energy_statistics(np.array(z), 3)
        expected = [_direct_q(z, tau) for tau in range(3, size - 3 + 1)]
        assert ours.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert energy_statistics(np.array([1.0, 2.0, 3.0]), 2).size == 0
    with pytest.raises(ValueError, match="min_size"):
        energy_statistics(np.array([1.0] * 5), 1)


def _noisy(rng: random.Random, level: float, count: int, cv: float = 0.02) -> list[float]:
    return [level * (1 + rng.gauss(0, cv)) for _ in range(count)]


def test_a_step_is_found_where_it_happens() -> None:
    rng = random.Random(7)
    series = _noisy(rng, 100.0, 6) + _noisy(rng, 77.0, 4)  # the run-7 drop of ten runs
    changes = e_divisive(series, alpha=0.05)
    assert [c.index for c in changes] == [6]
    assert changes[0].relative_change == pytest.approx(-0.23, abs=0.03)
    assert worse_fraction(changes[0], "output_tokens_per_s") == pytest.approx(0.23, abs=0.03)
    assert worse_fraction(changes[0], "ttft_p50_s") == pytest.approx(-0.23, abs=0.03)


def test_a_change_of_spread_is_found_with_the_same_mean() -> None:
    rng = random.Random(3)
    series = [rng.gauss(0, 0.1) for _ in range(40)] + [rng.gauss(0, 3.0) for _ in range(40)]
    changes = e_divisive(series, alpha=0.05, min_size=5)
    assert len(changes) >= 1
    assert abs(changes[0].index - 40) <= 3


def test_two_steps_are_both_found() -> None:
    rng = random.Random(11)
    series = _noisy(rng, 100.0, 30) + _noisy(rng, 80.0, 20) + _noisy(rng, 100.0, 30)
    changes = e_divisive(series, alpha=0.05)
    assert [c.index for c in changes] == [30, 50]
    assert changes[0].relative_change < -0.15 and changes[1].relative_change > 0.15


def test_stationary_series_raise_nothing_at_the_reported_size() -> None:
    """False alarms of the whole report (significance and at least a 10% change) over 100 clean series."""
    alarms = 0
    for seed in range(100):
        rng = random.Random(seed)
        series = _noisy(rng, 100.0, 10, cv=0.03)
        alarms += any(abs(c.relative_change) >= 0.1 for c in e_divisive(series, alpha=0.05, seed=seed))
    assert alarms == 0


def test_the_permutation_test_is_calibrated() -> None:
    """Under no change the p-value is roughly uniform: about 5% of series are significant at 0.05."""
    significant = 0
    for seed in range(200):
        rng = random.Random(1000 + seed)
        z = np.array([rng.gauss(0, 1) for _ in range(20)])
        observed = float(energy_statistics(z, 3).max())
        significant += permutation_p_value(z, observed, 3, 99, rng) < 0.05
    assert 2 <= significant <= 22


def test_same_history_same_answer_and_bad_input() -> None:
    rng = random.Random(5)
    series = _noisy(rng, 10.0, 8) + _noisy(rng, 13.0, 8)
    assert e_divisive(series) == e_divisive(series)
    with pytest.raises(ValueError, match="non-finite"):
        e_divisive([1.0, float("nan")])
    with pytest.raises(ValueError, match="alpha"):
        e_divisive([1.0], alpha=0.0)
    assert e_divisive([1.0, 2.0, 3.0]) == []
