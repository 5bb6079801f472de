"""The lifecycle check's parts: which cells it runs on, its prompts and requests, and the gates from what it saw.

Pure where it can be (`judge` reads only an `Observed`), so a failing verdict is shown without engines
(tests/unit/checks/test_lifecycle.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from canary.checks.lifecycle.settings import LifecycleCheckConfig
from canary.checks.parity.client import ParityError, post, root_url
from canary.config import CellMatch
from canary.judge.results import Gate
from canary.plan.cell import Cell
from canary.plan.matrix import matches

WORDS = "a farmer has 12 apples and buys 7 more, then gives 5 to each of his 2 friends; how many are left? "
"""Prompt text (GSM8K-like: the tiny builtin model is trained on arithmetic)."""


def selected(cell: Cell, settings: LifecycleCheckConfig) -> bool:
    """Whether the check runs on a cell: enabled, a P/D cell, and chosen by `cells` (empty: every P/D cell)."""
    if not settings.enabled or cell.topology != "pd-nixl":
        return False
    return not settings.cells or any(matches(CellMatch.model_validate(m), cell) for m in settings.cells)


def prompts(count: int) -> list[str]:
    """`count` prompts of growing length (about 170, 340, 510 ... tokens: past one, two, three 128-token
    blocks), so the KV that crosses NIXL spans several blocks."""
    return [f"question {index + 1}: " + WORDS * (8 * (index + 1)) for index in range(count)]


def complete(base_url: str, model: str, prompt: str, max_tokens: int, timeout_s: float) -> list[int]:
    """Greedy token ids of one completion (ignore_eos: always max_tokens of them). ParityError on failure."""
    url = f"{root_url(base_url)}/v1/completions"
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    data = post(url, body, timeout_s)
    choices = data.get("choices")
    ids = (
        choices[0].get("token_ids") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    )
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise ParityError(f"{url}: no token_ids in the answer")
    return [int(t) for t in ids]


@dataclass
class Observed:
    """What the check saw around one prefill restart."""

    restart_error: str | None
    """None: the restarted prefill was ready again; else why not."""
    restart_s: float
    prefill_pids: tuple[int | None, int | None]
    """Prefill's pid before and after the restart (a restart gives a new process)."""
    decode_pids: tuple[int | None, int | None]
    decode_exit: int | str | None
    """Decode's exit status after the restart (None: its process runs)."""
    outage_seen: bool
    """Prefill was seen down (its /health unreachable) while the restart ran."""
    outage_answer: str | None
    """None: decode answered a request sent straight to it while prefill was down; else why not."""
    before: list[list[int]]
    after: list[list[int] | None]
    after_errors: list[str] = field(default_factory=list)
    nixl_bytes_after: float | None = None
    """Bytes decode pulled over NIXL during the requests after the restart (None: not measured)."""


def judge(seen: Observed) -> list[Gate]:
    """The gates of one restart: prefill came back, decode never exited and served while prefill was down,
    the pair served every prompt again with the same greedy tokens, and KV moved from the new prefill."""
    same_decode = seen.decode_pids[0] is not None and seen.decode_pids[0] == seen.decode_pids[1]
    survived = seen.decode_exit is None and same_decode
    served = sum(1 for tokens in seen.after if tokens is not None)
    identical = sum(1 for old, new in zip(seen.before, seen.after, strict=True) if new is not None and new == old)
    total = len(seen.before)
    new_prefill = seen.prefill_pids[1] is not None and seen.prefill_pids[1] != seen.prefill_pids[0]
    moved = seen.nixl_bytes_after
    return [
        Gate(
            name="prefill-restarted",
            passed=seen.restart_error is None and new_prefill,
            observed=round(seen.restart_s, 3),
            detail=(
                f"prefill pid {seen.prefill_pids[0]} -> {seen.prefill_pids[1]}, "
                f"ready again after {seen.restart_s:.1f} s"
                if seen.restart_error is None
                else f"prefill did not come back: {seen.restart_error}"
            ),
        ),
        Gate(
            name="decode-survived",
            passed=survived,
            observed=1.0 if survived else 0.0,
            threshold=1.0,
            detail=(
                f"decode pid {seen.decode_pids[0]} ran through the restart"
                if survived
                else f"decode did not live through the restart (pid {seen.decode_pids[0]} -> {seen.decode_pids[1]}, "
                f"exit status {seen.decode_exit})"
            ),
        ),
        Gate(
            name="decode-served-during-restart",
            passed=seen.outage_seen and seen.outage_answer is None,
            detail=(
                "decode answered a request sent straight to it while prefill was down"
                if seen.outage_seen and seen.outage_answer is None
                else ("prefill was never seen down" if not seen.outage_seen else f"decode failed: {seen.outage_answer}")
            ),
        ),
        Gate(
            name="pair-serves-again",
            passed=served == total,
            observed=float(served),
            threshold=float(total),
            detail=f"{served}/{total} prompts served through the pair after the restart"
            + (f" ({'; '.join(seen.after_errors)})" if seen.after_errors else ""),
        ),
        Gate(
            name="parity-after-restart",
            passed=identical == total,
            observed=float(identical),
            threshold=float(total),
            detail=f"{identical}/{total} prompts gave the same greedy tokens after the restart as before it",
        ),
        Gate(
            name="kv-after-restart",
            passed=moved is not None and moved > 0,
            observed=moved,
            threshold=1.0,
            detail=(
                "decode's NIXL counters were not read"
                if moved is None
                else f"decode pulled {moved:.0f} bytes over NIXL from the restarted prefill"
            ),
        ),
    ]
