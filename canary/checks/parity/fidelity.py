"""Per-token logprob series and how two of them differ (KV fidelity of the parity check).

A *series* is what one arm saw for one prompt, position by position: the token it generated (or
was forced to score), that token's logprob and the top-k logprobs at that position. Series come
from vLLM's OpenAI completions API: `logprobs: k` with `return_tokens_as_token_ids` for generated
tokens (`series_from_completion`), `prompt_logprobs: k` with `max_tokens: 1` for teacher-forced
scoring of a given continuation (`series_from_prompt_logprobs`).

`compare(a, b)` measures, per position where both arms condition on the same tokens: a top-k KL
estimate KL(a || b), |delta logprob| of a's token, and whether the two argmaxes agree. For two
generations the comparable positions end at the first token that differs (included: both arms
still saw the same context there); a teacher-forced series scores the other arm's own tokens, so
every position compares. Pure functions: no I/O.

A disagreement can be a *near-tie*: both arms rank the same two tokens first and second, within a gap
the gates already accept as noise (`disagree_gap`, `first_diff_gap`: the larger of the two arms' own
gaps between the two tokens; infinite when either arm's top-k misses the other's token). The parity
check counts a flip at a near-tie no more than the |delta logprob| that caused it (`*_beyond(tie)`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from canary.errors import CanaryError

TOKEN_ID_PREFIX = "token_id:"
"""How vLLM spells a token with `return_tokens_as_token_ids`."""
PROB_FLOOR = 1e-12
"""Probabilities are clamped to this before taking logs (a bucket one side never saw)."""


class FidelityError(CanaryError):
    """A logprob response could not be read."""


@dataclass(frozen=True)
class Position:
    """One position: the token taken there, its logprob, and the top-k logprobs (token id -> logprob)."""

    token: int
    logprob: float
    top: Mapping[int, float]

    @property
    def argmax(self) -> int:
        """The most likely token among the known ones (ties: the lowest id, deterministic)."""
        known = {**self.top, self.token: self.logprob}
        best = max(known.values())
        return min(t for t, lp in known.items() if lp == best)

    def to_json(self) -> list[Any]:
        """[token, logprob, [[id, logprob], ...]] (compact, for the evidence)."""
        return [self.token, self.logprob, [[t, lp] for t, lp in sorted(self.top.items(), key=lambda x: -x[1])]]

    @classmethod
    def from_json(cls, row: Sequence[Any]) -> Position:
        """Inverse of to_json."""
        token, logprob, top = row
        return cls(int(token), float(logprob), {int(t): float(lp) for t, lp in top})


Series = list[Position]


def series_to_json(series: Sequence[Position]) -> list[list[Any]]:
    """A series for the evidence."""
    return [p.to_json() for p in series]


def series_from_json(rows: Sequence[Sequence[Any]]) -> Series:
    """A series from the evidence."""
    return [Position.from_json(r) for r in rows]


def _token_id(text: str, where: str) -> int:
    if not text.startswith(TOKEN_ID_PREFIX):
        raise FidelityError(f"{where}: token {text!r} is not 'token_id:N' (return_tokens_as_token_ids ignored?)")
    try:
        return int(text.removeprefix(TOKEN_ID_PREFIX))
    except ValueError:
        raise FidelityError(f"{where}: token {text!r} is not 'token_id:N'") from None


def series_from_completion(logprobs: Any, where: str) -> Series:
    """The generated positions of a completions choice's `logprobs` (tokens spelled as token ids)."""
    if not isinstance(logprobs, dict):
        raise FidelityError(f"{where}: the choice has no logprobs object")
    tokens, chosen, tops = logprobs.get("tokens"), logprobs.get("token_logprobs"), logprobs.get("top_logprobs")
    if not (isinstance(tokens, list) and isinstance(chosen, list) and isinstance(tops, list)):
        raise FidelityError(f"{where}: logprobs lacks tokens / token_logprobs / top_logprobs")
    if not len(tokens) == len(chosen) == len(tops):
        raise FidelityError(f"{where}: logprobs lists differ in length ({len(tokens)}, {len(chosen)}, {len(tops)})")
    out: Series = []
    for index, (token, lp, top) in enumerate(zip(tokens, chosen, tops, strict=True)):
        at = f"{where} position {index}"
        if not isinstance(top, dict) or not isinstance(lp, int | float):
            raise FidelityError(f"{at}: no top_logprobs / token logprob")
        out.append(Position(_token_id(str(token), at), float(lp), {_token_id(k, at): float(v) for k, v in top.items()}))
    return out


def series_from_prompt_logprobs(prompt_logprobs: Any, scored: Sequence[int], start: int, where: str) -> Series:
    """Teacher-forced positions start.. of a completions choice's `prompt_logprobs` (token id keys),
    scoring the tokens `scored` (the continuation that was appended to the prompt at `start`)."""
    if not isinstance(prompt_logprobs, list) or len(prompt_logprobs) != start + len(scored):
        size = len(prompt_logprobs) if isinstance(prompt_logprobs, list) else None
        raise FidelityError(f"{where}: prompt_logprobs has {size} entries, expected {start + len(scored)}")
    out: Series = []
    for offset, token in enumerate(scored):
        entry = prompt_logprobs[start + offset]
        at = f"{where} position {offset}"
        if not isinstance(entry, dict):
            raise FidelityError(f"{at}: no prompt logprobs")
        top: dict[int, float] = {}
        for key, value in entry.items():
            lp = value.get("logprob") if isinstance(value, dict) else value
            if not isinstance(lp, int | float):
                raise FidelityError(f"{at}: prompt logprob of {key!r} is not a number")
            top[int(str(key).removeprefix(TOKEN_ID_PREFIX))] = float(lp)
        if token not in top:
            raise FidelityError(f"{at}: the scored token {token} is missing from prompt_logprobs")
        out.append(Position(token, top[token], top))
    return out


def _distribution(top: Mapping[int, float], support: Sequence[int]) -> list[float]:
    """Probabilities over `support` plus a last 'everything else' bucket. A token outside this
    side's top-k gets the smallest known probability (an upper bound: it ranked below all of them)."""
    floor = math.exp(min(top.values())) if top else PROB_FLOOR
    probs = [math.exp(top[t]) if t in top else floor for t in support]
    total = sum(probs)
    if total > 1.0:  # the upper bounds overshot: scale the guessed ones down
        known = sum(math.exp(top[t]) for t in support if t in top)
        guessed = total - known
        scale = max(0.0, 1.0 - known) / guessed if guessed > 0 else 0.0
        probs = [p if t in top else p * scale for t, p in zip(support, probs, strict=True)]
        total = sum(probs)
    return [*probs, max(0.0, 1.0 - total)]


def kl_topk(a: Position, b: Position) -> float:
    """Estimate of KL(a || b) in nats over the union of both top-k sets plus one 'rest' bucket."""
    top_a, top_b = {**a.top, a.token: a.logprob}, {**b.top, b.token: b.logprob}
    support = sorted(set(top_a) | set(top_b))
    pa, pb = _distribution(top_a, support), _distribution(top_b, support)
    kl = sum(p * math.log(max(p, PROB_FLOOR) / max(q, PROB_FLOOR)) for p, q in zip(pa, pb, strict=True) if p > 0)
    return max(0.0, kl)


def _logprob_of(position: Position, token: int) -> float:
    """A token's logprob at a position (the smallest known one when it is outside the top-k)."""
    if token == position.token:
        return position.logprob
    if token in position.top:
        return position.top[token]
    return min([position.logprob, *position.top.values()])


@dataclass(frozen=True)
class Fidelity:
    """How series b differs from series a, position by position (the comparable positions)."""

    kl: list[float]
    abs_dlp: list[float]
    top1_agree: list[bool]
    first_token_diff: int | None
    """First position whose tokens differ (None: identical tokens over the shorter length)."""
    disagree_gap: list[float] = field(default_factory=list)
    """Per compared position: 0 where the argmaxes agree, else the near-tie gap (module doc); empty in
    evidence written before it was recorded (every disagreement then counts)."""
    first_diff_gap: float | None = None
    """The near-tie gap of the two tokens at first_token_diff (None: no such position or not recorded)."""

    @property
    def positions(self) -> int:
        """Compared positions."""
        return len(self.kl)

    @property
    def max_kl(self) -> float:
        """Largest per-position KL estimate."""
        return max(self.kl, default=0.0)

    @property
    def max_abs_dlp(self) -> float:
        """Largest |delta logprob| of a's token."""
        return max(self.abs_dlp, default=0.0)

    @property
    def top1_disagree(self) -> float:
        """Share of compared positions whose argmaxes differ."""
        return (len(self.top1_agree) - sum(self.top1_agree)) / len(self.top1_agree) if self.top1_agree else 0.0

    @property
    def token_diff(self) -> float:
        """1.0 when the two arms' tokens differ somewhere, else 0.0."""
        return 0.0 if self.first_token_diff is None else 1.0

    def top1_disagree_beyond(self, tie: float) -> float:
        """Share of compared positions whose argmaxes differ by more than a near-tie of `tie` nats."""
        if not self.disagree_gap:
            return self.top1_disagree
        return sum(gap > tie for gap in self.disagree_gap) / len(self.disagree_gap)

    def differs_beyond(self, tie: float) -> bool:
        """The tokens differ, and not at a near-tie of `tie` nats (unknown gap: it differs)."""
        if self.first_token_diff is None:
            return False
        return self.first_diff_gap is None or self.first_diff_gap > tie

    def to_json(self) -> dict[str, Any]:
        """The per-token series and the summary numbers, for the evidence."""
        return {
            "kl": [round(x, 9) for x in self.kl],
            "abs_dlp": [round(x, 9) for x in self.abs_dlp],
            "top1_agree": self.top1_agree,
            "first_token_diff": self.first_token_diff,
            "max_kl": round(self.max_kl, 9),
            "max_abs_dlp": round(self.max_abs_dlp, 9),
            "top1_disagree": round(self.top1_disagree, 6),
            "disagree_gap": [_finite(g) for g in self.disagree_gap],
            "first_diff_gap": None if self.first_diff_gap is None else _finite(self.first_diff_gap),
        }


def _finite(gap: float) -> float | str:
    """A gap for JSON ("inf" where a token's logprob is unknown)."""
    return "inf" if math.isinf(gap) else round(gap, 9)


def gap_from_json(value: Any) -> float:
    """Inverse of _finite."""
    return math.inf if value == "inf" else float(value)


def near_tie_gap(a: Position, b: Position, token_a: int, token_b: int) -> float:
    """How far from a tie two arms are that chose token_a (arm a) and token_b (arm b) at one position: the
    larger of a's logprob gap (token_a over token_b) and b's (token_b over token_a); infinite when either
    arm's top-k does not hold the other's token."""
    gaps = []
    for mine, theirs, position in ((token_a, token_b, a), (token_b, token_a, b)):
        known = {**position.top, position.token: position.logprob}
        if mine not in known or theirs not in known:
            return math.inf
        gaps.append(known[mine] - known[theirs])
    return max(gaps)


def compare(a: Sequence[Position], b: Sequence[Position], teacher_forced: bool = False) -> Fidelity:
    """Compare b with a. Two generations compare up to and including their first differing token;
    `teacher_forced` (b scored a's tokens) compares every position."""
    n = min(len(a), len(b))
    first_diff = next((i for i in range(n) if a[i].token != b[i].token), None)
    if first_diff is None and len(a) != len(b):
        first_diff = n
    if teacher_forced:
        if len(a) != len(b):
            raise FidelityError(f"teacher-forced series has {len(b)} positions, the generation {len(a)}")
        first_diff = None  # b was forced onto a's tokens: they cannot differ
    end = n if teacher_forced or first_diff is None else min(n, first_diff + 1)
    kl, dlp, agree, gaps = [], [], [], []
    for i in range(end):
        kl.append(kl_topk(a[i], b[i]))
        dlp.append(abs(a[i].logprob - _logprob_of(b[i], a[i].token)))
        agree.append(a[i].argmax == b[i].argmax)
        gaps.append(0.0 if agree[-1] else near_tie_gap(a[i], b[i], a[i].argmax, b[i].argmax))
    first_gap = None
    if first_diff is not None:
        first_gap = (
            near_tie_gap(a[first_diff], b[first_diff], a[first_diff].token, b[first_diff].token)
            if (first_diff < n)
            else math.inf
        )
    return Fidelity(kl, dlp, agree, first_diff, gaps, first_gap)
