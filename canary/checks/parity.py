"""Greedy token parity: P/D against its aggregated control, token for token.

Every cell (aggregated or P/D) sends the same fixed prompts, given as token ids so their lengths
are exact: the configured lengths (checks.parity.prompt_lengths) plus, with block_relative, B-1,
B+1 and 2B+1 for every block size B of the matrix (shorter than a block, just across one, across
several). The prompt ids are a fixed English text tokenized by the engine's own /tokenize and
cut to length, so every cell of a model gets identical ids. Each prompt is completed greedily
(temperature 0, ignore_eos, max_tokens) with `return_token_ids`.

Aggregated cells record their outputs in this check's evidence and pass. P/D cells compare with
the control's recorded outputs (ctx.control_for()); without a control that ran parity, the P/D
cell's own prefill server is asked directly (a plain, non-disaggregated request to the same
engine build) and the evidence says so. Metrics: parity_match_rate (prompts whose output tokens
are identical) and parity_first_diff_min (earliest differing output position over all prompts;
max_tokens when nothing differs). The gate: match rate >= min_match_rate (1.0 on CPU).
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from canary.checks.base import CheckContext, register
from canary.config import CanaryConfig
from canary.errors import CanaryError
from canary.results import CheckResult, Gate

SOURCE_TEXT = (
    "A farmer keeps sheep, goats and chickens on a small farm near the river. Every morning she counts "
    "the animals, writes the numbers in a notebook and sells eggs at the market in the town. "
    "Question: Tom has 3 apples and buys 4 more. How many apples does Tom have now?\nAnswer: 3 + 4 = 7\n"
    "#### 7\n\n"
)


class ParityError(CanaryError):
    """Parity could not be measured (endpoint unreachable, unexpected response)."""


@dataclass(frozen=True)
class PromptOutput:
    """One prompt and the greedy tokens generated for it."""

    length: int
    prompt_sha: str
    output_ids: list[int]


def prompt_lengths(config: CanaryConfig) -> list[int]:
    """The prompt lengths every cell uses: configured + block-relative ones, within the model length."""
    parity = config.checks.parity
    lengths = set(parity.prompt_lengths)
    if parity.block_relative:
        blocks = set(config.matrix.prefill_block_sizes) | set(config.matrix.decode_block_sizes or [])
        blocks |= {c.prefill_block_size for c in config.matrix.include}
        blocks |= {c.decode_block_size for c in config.matrix.include}
        for block in blocks:
            lengths |= {block - 1, block + 1, 2 * block + 1}
    limit = min(m.max_model_len for m in config.models) - parity.max_tokens
    return sorted(n for n in lengths if 1 <= n <= limit)


def _post(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:300]
        raise ParityError(f"POST {url}: HTTP {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise ParityError(f"POST {url}: {exc}") from None
    if not isinstance(data, dict):
        raise ParityError(f"POST {url}: expected a JSON object")
    return data


def _root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def tokenize(base_url: str, model: str, text: str, timeout_s: float = 60.0) -> list[int]:
    """Token ids of `text` (with the model's special tokens, e.g. BOS) from the server's /tokenize."""
    data = _post(f"{_root(base_url)}/tokenize", {"model": model, "prompt": text, "add_special_tokens": True}, timeout_s)
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ParityError(f"{base_url}/tokenize returned no token ids")
    return tokens


def build_prompts(base_url: str, model: str, lengths: list[int]) -> list[list[int]]:
    """Token-id prompts of exactly the given lengths, cut from one tokenization of SOURCE_TEXT."""
    longest = max(lengths, default=0)
    text, ids = SOURCE_TEXT, tokenize(base_url, model, SOURCE_TEXT)
    while len(ids) < longest:
        text += SOURCE_TEXT
        ids = tokenize(base_url, model, text)
    return [ids[:n] for n in lengths]


def prompt_sha(ids: list[int]) -> str:
    """Short fingerprint of a token-id prompt (identical prompts across cells)."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def complete_greedy(base_url: str, model: str, prompt: list[int], max_tokens: int, timeout_s: float) -> list[int]:
    """The greedy output token ids for a token-id prompt."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    data = _post(f"{_root(base_url)}/v1/completions", body, timeout_s)
    try:
        choice = data["choices"][0]
        out = choice["token_ids"]
    except (KeyError, IndexError, TypeError):
        raise ParityError(f"{base_url}: completion without token_ids: {json.dumps(data)[:300]}") from None
    got_prompt = choice.get("prompt_token_ids")
    if isinstance(got_prompt, list) and got_prompt != prompt:
        raise ParityError(f"{base_url}: the server saw {len(got_prompt)} prompt tokens instead of {len(prompt)}")
    if not isinstance(out, list):
        raise ParityError(f"{base_url}: token_ids is not a list")
    return [int(t) for t in out]


def run_prompts(
    base_url: str, model: str, prompts: list[list[int]], max_tokens: int, timeout_s: float = 120.0
) -> list[PromptOutput]:
    """Complete every prompt greedily, one after another."""
    return [
        PromptOutput(len(p), prompt_sha(p), complete_greedy(base_url, model, p, max_tokens, timeout_s)) for p in prompts
    ]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix), None if equal."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Comparison:
    """Candidate vs reference over the shared prompts."""

    compared: int
    matched: int
    first_diff_min: int | None
    per_prompt: list[dict[str, Any]]

    @property
    def match_rate(self) -> float:
        """Share of compared prompts with identical output tokens."""
        return self.matched / self.compared if self.compared else 0.0


def compare(candidate: list[PromptOutput], reference: list[PromptOutput]) -> Comparison:
    """Compare outputs of the same prompts (matched by fingerprint)."""
    by_sha = {r.prompt_sha: r for r in reference}
    rows: list[dict[str, Any]] = []
    matched, diffs = 0, []
    for out in candidate:
        ref = by_sha.get(out.prompt_sha)
        if ref is None:
            continue
        diff = first_difference(out.output_ids, ref.output_ids)
        matched += diff is None
        if diff is not None:
            diffs.append(diff)
        rows.append({"length": out.length, "match": diff is None, "first_diff": diff})
    return Comparison(len(rows), matched, min(diffs) if diffs else None, rows)


def _reference_from_control(ctx: CheckContext) -> tuple[list[PromptOutput] | None, str]:
    control = ctx.control_for()
    if control is None:
        return None, "no aggregated control started"
    parity = control.check("parity")
    if parity is None or "outputs" not in parity.evidence:
        return None, f"control {control.cell.id} recorded no parity outputs"
    return [PromptOutput(**row) for row in parity.evidence["outputs"]], f"control {control.cell.id}"


def _tokenizer_url(ctx: CheckContext) -> str:
    for role in ("aggregated", "prefill", "decode"):
        server = ctx.deployment.server(role)
        if server is not None:
            return server.base_url
    return ctx.deployment.base_url


@register("parity")
def parity_check(ctx: CheckContext) -> CheckResult:
    """Greedy outputs of fixed token-id prompts; P/D cells must match the aggregated control."""
    settings = ctx.config.checks.parity
    model = ctx.deployment.served_model
    lengths = prompt_lengths(ctx.config)
    try:
        prompts = build_prompts(_tokenizer_url(ctx), model, lengths)
        outputs = run_prompts(ctx.deployment.base_url, model, prompts, settings.max_tokens)
    except ParityError as exc:
        return CheckResult(name="parity", verdict="error", summary=str(exc))
    evidence: dict[str, Any] = {"outputs": [asdict(o) for o in outputs], "prompt_lengths": lengths}
    if ctx.cell.topology != "pd-nixl":
        return CheckResult(
            name="parity",
            verdict="pass",
            summary=f"recorded greedy outputs of {len(outputs)} prompts ({lengths[0]}..{lengths[-1]} tokens)",
            metrics={"parity_prompts": float(len(outputs))},
            evidence=evidence,
        )
    reference, source = _reference_from_control(ctx)
    if reference is None:
        prefill = ctx.deployment.server("prefill")
        if prefill is None:
            return CheckResult(name="parity", verdict="skipped", summary=f"no reference: {source}", evidence=evidence)
        try:
            reference = run_prompts(prefill.base_url, model, prompts, settings.max_tokens)
        except ParityError as exc:
            return CheckResult(name="parity", verdict="error", summary=f"reference (prefill server): {exc}")
        source = f"this cell's prefill server directly ({source})"
    result = compare(outputs, reference)
    evidence.update({"reference": source, "per_prompt": result.per_prompt})
    if result.compared == 0:
        return CheckResult(
            name="parity", verdict="error", summary=f"no prompt in common with the reference ({source})",
            evidence=evidence,
        )
    first_diff = settings.max_tokens if result.first_diff_min is None else result.first_diff_min
    gate = Gate(
        name="token-exact-match",
        passed=result.match_rate >= settings.min_match_rate,
        observed=round(result.match_rate, 4),
        threshold=settings.min_match_rate,
        detail=(
            f"{result.matched}/{result.compared} prompts token-identical to {source}"
            + ("" if result.first_diff_min is None else f"; first difference at output token {first_diff}")
        ),
    )
    return CheckResult(
        name="parity",
        verdict="pass" if gate.passed else "fail",
        summary=gate.detail,
        metrics={
            "parity_match_rate": round(result.match_rate, 4),
            "parity_first_diff_min": float(first_diff),
            "parity_prompts": float(result.compared),
        },
        gates=[gate],
        evidence=evidence,
    )
