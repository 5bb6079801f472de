"""Gates of the parity check: P/D against the engine's own noise floor, and where it diverged.

The null arm is the control against itself (another batch composition, a prefix-cache hit vs a
miss, teacher-forced vs generated): differences with no bug at all. For each metric (top-k KL,
max |delta logprob|, top-1 disagreement) the P/D prompt *exceeds* the floor when its value is
above `margin x (largest null value) + tolerance`.

- If the null arm saw no difference at all in that metric (CPU: bit-identical), the gate is
  exact: one exceeding prompt fails it.
- Otherwise, by exchangeability, a P/D prompt that behaves like a null comparison exceeds the
  largest of m null values with probability <= 1/(m+1) (less with margin > 1). The gate fails when
  the number of exceeding prompts k out of n has a binomial tail P(X >= k | n, 1/(m+1)) < alpha:
  the P/D cell exceeds the floor by the stated margin at confidence 1 - alpha.

Greedy tokens: the share of P/D prompts whose tokens differ from the control's is compared with
the share of null comparisons that differ (one-sided Fisher exact test at alpha); when the null
arm never differs, the gate is token-exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from canary.checks.parity.fidelity import Fidelity

METRICS: dict[str, Callable[[Fidelity], float]] = {
    "kl": lambda f: f.max_kl,
    "abs_dlp": lambda f: f.max_abs_dlp,
    "top1_disagree": lambda f: f.top1_disagree,
}
"""Per-prompt summary metrics gated against the null arm (name -> value of a comparison)."""


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def fisher_greater(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided Fisher exact p-value that group 1's rate (k1/n1) exceeds group 2's (k2/n2)."""
    total, hits = n1 + n2, k1 + k2
    denominator = math.comb(total, hits)
    upper = min(n1, hits)
    return min(1.0, sum(math.comb(n1, i) * math.comb(n2, hits - i) for i in range(k1, upper + 1)) / denominator)


@dataclass(frozen=True)
class FloorGate:
    """One metric of P/D against the null arm."""

    metric: str
    floor: float
    """Largest null value."""
    threshold: float
    """margin x floor + tolerance: a prompt above it exceeds the floor."""
    exact: bool
    """The null arm saw no difference (floor 0): one exceeding prompt fails."""
    exceeding: list[int]
    """Indices (into the P/D prompts) above the threshold."""
    prompts: int
    null_comparisons: int
    p_value: float
    passed: bool

    def detail(self) -> str:
        """One sentence with the numbers."""
        rule = (
            "exact (null floor 0)"
            if self.exact
            else f"binomial p={self.p_value:.3g} vs 1/(m+1), m={self.null_comparisons}"
        )
        return (
            f"{len(self.exceeding)}/{self.prompts} prompts above {self.threshold:.3g} "
            f"(null floor {self.floor:.3g}); {rule}"
        )


def floor_gate(
    metric: str, pd_values: Sequence[float], null_values: Sequence[float], margin: float, tolerance: float, alpha: float
) -> FloorGate:
    """Gate one metric of the P/D prompts against the null arm's values (see the module doc)."""
    floor = max(null_values, default=0.0)
    threshold = margin * floor + tolerance
    exceeding = [i for i, v in enumerate(pd_values) if v > threshold]
    exact = floor == 0.0
    if exact:
        p_value = 0.0 if exceeding else 1.0
        passed = not exceeding
    else:
        p_value = binomial_tail(len(exceeding), len(pd_values), 1.0 / (len(null_values) + 1))
        passed = p_value >= alpha
    return FloorGate(metric, floor, threshold, exact, exceeding, len(pd_values), len(null_values), p_value, passed)


@dataclass(frozen=True)
class TokenGate:
    """Greedy-token disagreement of P/D against the null arm's."""

    pd_diff: int
    prompts: int
    null_diff: int
    null_comparisons: int
    p_value: float
    passed: bool

    @property
    def exact(self) -> bool:
        """The null arm never changed a token: the gate is token-exact."""
        return self.null_diff == 0

    def detail(self) -> str:
        """One sentence with the numbers."""
        rule = "token-exact (null arm identical)" if self.exact else f"Fisher p={self.p_value:.3g}"
        return (
            f"{self.prompts - self.pd_diff}/{self.prompts} prompts token-identical to the control "
            f"(null arm: {self.null_comparisons - self.null_diff}/{self.null_comparisons}); {rule}"
        )


def token_gate(pd_diff: Sequence[bool], null_diff: Sequence[bool], alpha: float) -> TokenGate:
    """Fail when P/D changes greedy tokens more often than the null arm does (exact if it never does)."""
    k1, n1, k2, n2 = sum(pd_diff), len(pd_diff), sum(null_diff), len(null_diff)
    if k2 == 0:
        return TokenGate(k1, n1, k2, n2, 0.0 if k1 else 1.0, k1 == 0)
    p_value = fisher_greater(k1, n1, k2, n2)
    return TokenGate(k1, n1, k2, n2, p_value, p_value >= alpha)


# --------------------------------------------------------------------------- where it diverged


@dataclass(frozen=True)
class BlockSide:
    """One side's block sizes (a P/D pair has two; the control one)."""

    name: str
    logical: int
    kernel: int | None


def first_divergence(fidelity: Fidelity, thresholds: dict[str, float]) -> int | None:
    """First output position where the tokens differ or the KL / |delta logprob| exceeds its threshold."""
    kl_max, dlp_max = thresholds.get("kl", math.inf), thresholds.get("abs_dlp", math.inf)
    hits = [i for i in range(fidelity.positions) if fidelity.kl[i] > kl_max or fidelity.abs_dlp[i] > dlp_max]
    if fidelity.first_token_diff is not None:
        hits.append(fidelity.first_token_diff)
    return min(hits, default=None)


def _blocks(tokens: int, size: int) -> int:
    return -(-tokens // size)


def loaded_blocks(prompt_len: int, size: int) -> tuple[int, int]:
    """The fewest and most KV blocks a P/D decode loads for a prompt: its KV of every prompt token but
    the last for certain, the last one's too where the transfer sends it (B+1 tokens: one or two)."""
    return max(1, _blocks(prompt_len - 1, size)), _blocks(prompt_len, size)


def locate(prompt_len: int, position: int, sides: Sequence[BlockSide]) -> dict[str, object]:
    """Where output position `position` of a `prompt_len`-token prompt falls, on every side: the
    block (1-based) holding the query that produced it, of how many the prompt fills, and whether
    the context crossed a block boundary between the first output token and this one."""
    query = prompt_len + position - 1  # the last context token: its query produced output `position`
    out: dict[str, object] = {"position": position, "context_position": query}
    for side in sides:
        for kind, size in (("logical", side.logical), ("kernel", side.kernel)):
            if size is None:
                continue
            out[f"{side.name}_{kind}_block"] = query // size + 1
            out[f"{side.name}_{kind}_prompt_blocks"] = _blocks(prompt_len, size)
            out[f"{side.name}_{kind}_crossed"] = (prompt_len - 1) // size != query // size
    return out


def divergence_bounds(
    failing: Sequence[tuple[int, int]], passing: Sequence[int], block: int
) -> tuple[int, int, int] | None:
    """(low, high, last) from prompt lengths: the first corrupt block k (1-based) lies in low..high,
    of `last` blocks the longest failing prompt loads; None when no prompt fails. `failing` =
    (prompt length, first divergent output position), `passing` = lengths of prompts that stayed
    within the noise, `block` = the logical block size the blocks are counted in (the smallest of
    the cell's). A passing prompt loaded at least lo blocks cleanly (k > lo), a failing one at most
    hi blocks (k <= hi) (loaded_blocks); low > high: not a block-position pattern."""
    if not failing:
        return None
    low = max((loaded_blocks(length, block)[0] for length in passing), default=0) + 1
    high = min(loaded_blocks(length, block)[1] for length, _ in failing)
    last = max(loaded_blocks(length, block)[1] for length, _ in failing)
    return low, high, last


def first_divergent_block(failing: Sequence[tuple[int, int]], passing: Sequence[int], block: int) -> int | None:
    """The block the divergence starts at as far as the prompt lengths tell (the earliest one it
    can start at); None when nothing fails or the failures follow no block-position pattern."""
    bounds = divergence_bounds(failing, passing, block)
    if bounds is None or bounds[0] > bounds[1]:
        return None
    return bounds[0]


def diagnose(failing: Sequence[tuple[int, int]], passing: Sequence[int], block: int) -> str:
    """A short diagnosis from prompt lengths (arguments and bounds: divergence_bounds)."""
    bounds = divergence_bounds(failing, passing, block)
    if bounds is None:
        return "no divergence beyond the noise floor"
    low, high, last = bounds
    unit = f"blocks of {block} tokens"
    if low > high:
        where = f"not a block-position pattern: a longer prompt matches while a shorter one diverges ({unit})"
    elif high == 1:
        where = f"from the first block: every prompt length is affected ({unit})"
    elif low == 1:
        where = f"divergence by block {high} of {last} at the latest (no shorter prompt was evidence; {unit})"
    else:
        start = f"block {low}" if low == high else f"block {low}..{high}"
        beyond = "the first" if low == 2 else f"block {low - 1}"
        where = (
            f"divergence starts at {start} of {last} (prompts that load up to {low - 1} block(s) of {block} "
            f"tokens match): blocks beyond {beyond}"
        )
    later_onsets = [(length, pos) for length, pos in failing if pos > 0]
    if later_onsets and len(later_onsets) == len(failing):
        where += "; every failing prompt's first output token is within the noise, divergence starts later"
    return where
