"""Change points in a metric's history: E-Divisive means with a permutation test.

Apache Otava (formerly Hunter) finds change points with E-Divisive; apache-otava 0.8.0 installs on
Python 3.11 but pins numpy 2.2, scipy 1.16 and python-dateutil 2.9 (below this project's pins) and
pulls BigQuery, Slack and PostgreSQL clients, so the algorithm is implemented here (Matteson &
James, "A Nonparametric Approach for Multiple Change Point Analysis of Multivariate Data", JASA
2014), univariate, with alpha = 1:

- For a segment z_0..z_{n-1} and a split tau (left z_0..z_{tau-1}, right the rest), with
  D_ij = |z_i - z_j|, the energy statistic is
  Q(tau) = tau (n - tau) / n * (2/(tau (n-tau)) * sum_between D - sum_within_left D / C(tau, 2)
                               - sum_within_right D / C(n - tau, 2)).
  It is large when the two sides differ in distribution (not only in mean); the best split
  maximises it over tau with at least `min_size` points on each side.
- Significance: the segment's values are permuted `permutations` times (a seeded generator: the
  same history gives the same answer); p = (1 + #{permuted max Q >= observed max Q}) /
  (1 + permutations). A split with p < `alpha` is a change point.
- Hierarchical (binary) segmentation: after a change point, each side is searched again, until no
  significant split remains.

A change point is reported only when the means on each side differ by at least
`min_relative_change` of the earlier mean: the detector has no fixed threshold, but a 1% shift
that is statistically real on a quiet metric is not worth an alert.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from canary.load.stats import higher_is_better

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Split:
    """The best split of a segment: index (first point of the right side) and its statistic."""

    index: int
    statistic: float


def energy_statistics_batch(rows: FloatArray, min_size: int) -> FloatArray:
    """Q(tau) of every row of a (count, n) array, for tau = min_size .. n - min_size: shape
    (count, n - 2 min_size + 1); (count, 0) when no split fits."""
    count, n = rows.shape
    if min_size < 2:
        raise ValueError(f"min_size must be >= 2 (within-side means need two points), got {min_size}")
    if n < 2 * min_size:
        return np.empty((count, 0))
    distances = np.abs(rows[:, :, None] - rows[:, None, :])
    total = distances.sum(axis=(1, 2))[:, None]
    cumulative = distances.cumsum(axis=1).cumsum(axis=2)
    taus = np.arange(min_size, n - min_size + 1)
    left_block = cumulative[:, taus - 1, taus - 1]  # sum D[:tau, :tau] (both orders of each pair)
    left_rows = cumulative[:, taus - 1, n - 1]  # sum D[:tau, :]
    between = left_rows - left_block
    right_block = total - 2.0 * left_rows + left_block
    right = n - taus
    within_left = (left_block / 2.0) / (taus * (taus - 1) / 2.0)
    within_right = (right_block / 2.0) / (right * (right - 1) / 2.0)
    energy = 2.0 * between / (taus * right) - within_left - within_right
    result: FloatArray = (taus * right / n) * energy
    return result


def energy_statistics(values: FloatArray, min_size: int) -> FloatArray:
    """Q(tau) for tau = min_size .. n - min_size (index 0 is tau = min_size); empty if none fit."""
    result: FloatArray = energy_statistics_batch(values[None, :], min_size)[0]
    return result


def best_split(values: FloatArray, min_size: int) -> Split | None:
    """The split with the largest statistic, or None when the segment is too short."""
    stats = energy_statistics(values, min_size)
    if stats.size == 0:
        return None
    best = int(np.argmax(stats))
    return Split(index=best + min_size, statistic=float(stats[best]))


# Permutations evaluated at once: bounded so that a batch's distance arrays stay near 16 MB.
_BATCH_CELLS = 2_000_000


def permutation_p_value(
    values: FloatArray,
    observed: float,
    min_size: int,
    permutations: int,
    rng: random.Random,
    stop_at: float | None = None,
) -> float:
    """(1 + #{max Q of a permutation >= observed}) / (1 + permutations).

    With `stop_at`, the count stops once the p-value cannot fall below it any more (the decision
    "not significant at stop_at" is then certain); the value returned is a lower bound >= stop_at.
    """
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    n = len(values)
    threshold = observed - 1e-12 * max(1.0, abs(observed))
    batch = max(1, min(permutations, _BATCH_CELLS // max(1, n * n)))
    exceed, done = 0, 0
    order = list(range(n))
    while done < permutations:
        size = min(batch, permutations - done)
        indices = np.empty((size, n), dtype=np.int64)
        for row in range(size):
            rng.shuffle(order)
            indices[row] = order
        stats = energy_statistics_batch(values[indices], min_size)
        if stats.shape[1]:
            exceed += int((stats.max(axis=1) >= threshold).sum())
        done += size
        if stop_at is not None and (1 + exceed) / (1 + permutations) >= stop_at:
            break
    return (1 + exceed) / (1 + permutations)


@dataclass(frozen=True)
class ChangePoint:
    """A significant split of the series at `index` (the first point of the new regime)."""

    index: int
    p_value: float
    statistic: float
    mean_before: float
    mean_after: float

    @property
    def relative_change(self) -> float:
        """(mean after - mean before) / |mean before| (nan when the earlier mean is 0)."""
        return (self.mean_after - self.mean_before) / abs(self.mean_before) if self.mean_before else math.nan


def e_divisive(
    series: Sequence[float],
    *,
    alpha: float = 0.01,
    permutations: int = 499,
    min_size: int = 3,
    seed: int = 0,
) -> list[ChangePoint]:
    """Significant change points of a series, in index order.

    Each change point's means are those of the regimes directly before and after it (between the
    neighbouring change points), so a step down followed by a step up reports both steps.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    values = np.asarray(series, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("e_divisive: the series holds non-finite values")
    rng = random.Random(seed)
    found: dict[int, tuple[float, float]] = {}
    pending: list[tuple[int, int]] = [(0, len(values))]
    while pending:
        start, end = pending.pop()
        segment = values[start:end]
        split = best_split(segment, min_size)
        if split is None or split.statistic <= 0.0:
            continue
        p_value = permutation_p_value(segment, split.statistic, min_size, permutations, rng, stop_at=alpha)
        if p_value >= alpha:
            continue
        at = start + split.index
        found[at] = (p_value, split.statistic)
        pending.extend([(start, at), (at, end)])
    bounds = [0, *sorted(found), len(values)]
    out: list[ChangePoint] = []
    for k in range(1, len(bounds) - 1):
        at = bounds[k]
        p_value, statistic = found[at]
        out.append(
            ChangePoint(
                index=at,
                p_value=p_value,
                statistic=statistic,
                mean_before=float(values[bounds[k - 1] : at].mean()),
                mean_after=float(values[at : bounds[k + 1]].mean()),
            )
        )
    return out


def worse_fraction(change: ChangePoint, metric: str) -> float:
    """How much worse the metric got at the change point (negative: better), as a fraction."""
    relative = change.relative_change
    return -relative if higher_is_better(metric) else relative
