"""Statistics behind the accuracy gates: Wilson intervals, the exact McNemar test, and the
sequential early-stop rule.

Stdlib only (exact binomial sums with integers, the normal quantile from `statistics`), so the
controller needs no scipy at run time; tests check every function against scipy/statsmodels.

The absolute gate
-----------------
A cell fails when its accuracy is *significantly below* the threshold T: when the upper end of
the two-sided Wilson interval at confidence c lies below T. That is the same rule as "the observed
accuracy is below the Wilson (score) lower limit around T": the Wilson interval is exactly the set
of p with |p_hat - p| <= z * sqrt(p (1 - p) / n), so T lies above the interval iff
p_hat < T - z * sqrt(T (1 - T) / n). A healthy cell (true accuracy >= T) fails with probability
at most (1 - c) / 2.

The paired gate
---------------
P/D cell vs its aggregated control on the same prompts. Only discordant questions carry
information: b = control right / P/D wrong, c = control wrong / P/D right. Under "no difference"
b ~ Binomial(b + c, 1/2). The exact two-sided McNemar p-value is min(1, 2 * P(X <= min(b, c))).
The gate fails only when p < alpha AND b > c (P/D significantly worse); P/D being better passes.

Sequential early stop
---------------------
Questions run in K planned batches ("looks"). Two rules decide after each look:
1. Curtailment (exact, costs no error): the final-look verdict is already fixed whatever the
   remaining answers are (all right or all wrong cannot change it).
2. Bonferroni over looks: at every look, the last included, the Wilson interval is taken at
   confidence c_K = 1 - (1 - c) / K. Stop with FAIL when its upper end < T; stop with PASS when
   its lower end >= T. With alpha split evenly over K looks, the chance that a cell with true
   accuracy >= T ever fails is <= (1 - c) / 2, and that one with true accuracy < T ever passes
   early is <= (1 - c) / 2 (union bound over looks). A healthy cell passes early only when the
   threshold sits far enough below its accuracy (tolerance > 0); otherwise it runs every look
   and the last look decides.
The paired gate uses the same split: exact McNemar at alpha / K per look, fail early when
significant and P/D worse; curtailed pass when even all remaining questions going against P/D
could not make the final test significant.
With early stop off there is a single look (K = 1) at the configured confidence and alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

Decision = Literal["pass", "fail", "continue"]


def z_two_sided(confidence: float) -> float:
    """The standard normal quantile z with P(|Z| <= z) = confidence."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    return float(NormalDist().inv_cdf(0.5 + confidence / 2.0))


def wilson_interval(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Two-sided Wilson score interval for a binomial proportion.

    Returns (0.0, 1.0) for n == 0 (nothing observed, nothing excluded).
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z = z_two_sided(confidence)
    p_hat = successes / n
    z2n = z * z / n
    center = (p_hat + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(p_hat * (1.0 - p_hat) / n + z2n / (4.0 * n)) / (1.0 + z2n)
    low, high = center - half, center + half
    # exact at the edges (floating error would otherwise leave 1e-17 instead of 0)
    if successes == 0:
        low = 0.0
    if successes == n:
        high = 1.0
    return max(0.0, low), min(1.0, high)


def binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact (integer sums)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    total = sum(math.comb(n, i) for i in range(k + 1))
    return total / (1 << n)


def mcnemar_exact(control_only: int, candidate_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts.

    control_only: questions the control got right and the candidate (P/D) wrong;
    candidate_only: the reverse. Equal to statsmodels' mcnemar(table, exact=True).pvalue.
    """
    if control_only < 0 or candidate_only < 0:
        raise ValueError("discordant counts must be >= 0")
    n = control_only + candidate_only
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf_half(min(control_only, candidate_only), n))


@dataclass(frozen=True)
class AbsoluteLook:
    """The absolute gate's state after one look."""

    decision: Decision
    reason: str
    wilson_low: float
    wilson_high: float
    confidence: float


def look_confidence(confidence: float, looks: int) -> float:
    """Per-look confidence under a Bonferroni split of 1 - confidence over `looks` looks."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return 1.0 - (1.0 - confidence) / looks


def absolute_look(correct: int, seen: int, total: int, threshold: float, confidence: float, looks: int) -> AbsoluteLook:
    """Decide the absolute gate after `seen` of `total` planned questions.

    `looks` is the number of planned looks (1 = no early stop: only the final look decides).
    At the final look (seen == total) the decision is pass or fail, never continue.
    """
    if not 0 <= correct <= seen <= total:
        raise ValueError(f"need 0 <= correct <= seen <= total, got {correct}, {seen}, {total}")
    level = look_confidence(confidence, looks)
    low, high = wilson_interval(correct, seen, level)
    final = seen == total
    if high < threshold:
        return AbsoluteLook("fail", f"Wilson upper bound {high:.3f} < {threshold:.3f}", low, high, level)
    if final:
        return AbsoluteLook("pass", f"Wilson upper bound {high:.3f} >= {threshold:.3f}", low, high, level)
    remaining = total - seen
    best_high = wilson_interval(correct + remaining, total, level)[1]
    if best_high < threshold:
        return AbsoluteLook(
            "fail",
            f"curtailed: even {remaining} more right answers leave the bound below {threshold:.3f}",
            low,
            high,
            level,
        )
    worst_high = wilson_interval(correct, total, level)[1]
    if worst_high >= threshold:
        return AbsoluteLook(
            "pass",
            f"curtailed: even {remaining} more wrong answers keep the bound >= {threshold:.3f}",
            low,
            high,
            level,
        )
    if low >= threshold:
        return AbsoluteLook("pass", f"Wilson lower bound {low:.3f} >= {threshold:.3f}", low, high, level)
    reason = f"Wilson interval [{low:.3f}, {high:.3f}] contains {threshold:.3f}"
    return AbsoluteLook("continue", reason, low, high, level)


@dataclass(frozen=True)
class PairedLook:
    """The paired (McNemar) gate's state after one look."""

    decision: Decision
    reason: str
    p_value: float
    alpha: float


def paired_look(control_only: int, candidate_only: int, remaining: int, alpha: float, looks: int) -> PairedLook:
    """Decide the paired gate after one look.

    control_only / candidate_only: discordant counts so far (control right & P/D wrong, and the
    reverse); remaining: paired questions still to run (0 at the final look).
    """
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    level = alpha / looks
    p_value = mcnemar_exact(control_only, candidate_only)
    if p_value < level and control_only > candidate_only:
        return PairedLook(
            "fail",
            f"P/D worse: {control_only} vs {candidate_only} discordant, p={p_value:.2g} < {level:.2g}",
            p_value,
            level,
        )
    if remaining == 0:
        return PairedLook(
            "pass",
            f"no significant loss: {control_only} vs {candidate_only} discordant, p={p_value:.2g}",
            p_value,
            level,
        )
    worst = mcnemar_exact(control_only + remaining, candidate_only)
    if worst >= level:
        return PairedLook(
            "pass", f"curtailed: even {remaining} more P/D-only errors keep p >= {level:.2g}", p_value, level
        )
    return PairedLook("continue", f"{control_only} vs {candidate_only} discordant, p={p_value:.2g}", p_value, level)


def planned_looks(limit: int, batch_size: int, early_stop: bool) -> int:
    """How many looks a run of `limit` questions in batches of `batch_size` plans."""
    if not early_stop:
        return 1
    return max(1, math.ceil(limit / batch_size))
