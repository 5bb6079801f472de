"""The parity check's settings (`checks.parity`): imports only canary.config and canary.core."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from canary.config.base import CheckSection, PositiveInt, Probability, Strict


class ParityCheckConfig(Strict):
    """KV fidelity of P/D against the aggregated control, calibrated against the control's own noise."""

    enabled: bool = Field(True, description="Run parity (aggregated cells record the reference and null arm).")
    prompt_lengths: list[PositiveInt] = Field(
        [8], description="Prompt lengths in tokens, besides the block-relative ones."
    )
    block_relative: bool = Field(
        True,
        description="Also B/2, B-1, B, B+1, 2B, 2B+1 and 4B+1 tokens for every block size B of the planned cells "
        "(logical and kernel, prefill and decode), and the longest prompt that fits.",
    )
    max_tokens: PositiveInt = Field(32, description="Greedy tokens generated per prompt (ignore_eos).")
    top_logprobs: PositiveInt = Field(5, le=20, description="Top-k logprobs per position (both arms).")
    prompt_text: Literal["auto", "gsm8k", "natural", "mixed"] = Field(
        "auto",
        description=(
            "Text the prompts are cut from: gsm8k (held-out GSM8K-format items), natural (the project's "
            "prose paragraphs, canary/checks/parity/text.py), mixed (both, interleaved); auto: gsm8k for a "
            "builtin model (trained on arithmetic only), mixed for any other."
        ),
    )
    item_offset: int = Field(0, ge=0, description="Index of the held-out item the first prompt starts at.")
    dependence_min_nats: float = Field(
        0.01,
        gt=0,
        description="A prompt is evidence only if altering its first block changes the control's greedy tokens "
        "or moves a generated token's logprob by at least this much (and beyond the null arm).",
    )
    dependence_tokens: PositiveInt = Field(
        16, description="Greedy tokens generated for a prompt's altered-first-block twin (the evidence check)."
    )
    min_evidence_prompts: PositiveInt = Field(
        3, description="Fewer evidence prompts than this: the check is invalid (inconclusive), never pass."
    )
    null_concurrency: PositiveInt = Field(
        8, description="Requests in flight in the control's concurrent wave (the batch-composition null arm)."
    )
    margin: float = Field(
        2.0, ge=1.0, description="A P/D prompt exceeds the noise floor above margin x the largest null value."
    )
    alpha: Probability = Field(
        0.01, description="Significance of the exceedance (binomial) and token (Fisher) gates vs the null arm."
    )
    kl_tolerance: float = Field(1e-4, ge=0, description="Nats added to the KL threshold (float arithmetic).")
    logprob_tolerance: float = Field(
        1e-3, ge=0, description="Nats added to the absolute delta-logprob threshold (float arithmetic)."
    )
    tp_kl_tolerance: float = Field(
        5e-3,
        ge=0,
        description="kl_tolerance of a P/D cell whose tensor-parallel ranks differ from its control's (a shape such "
        "as 2p1d against a TP-1 control): a different rank count sums in another order, so logprobs move a little "
        "with every token still identical (measured on the tiny Llama 2p1d: KL max 5.5e-4, 9/9 prompts "
        "token-identical). The token and top-1 gates keep their exactness.",
    )
    tp_logprob_tolerance: float = Field(
        0.1,
        ge=0,
        description="logprob_tolerance of such a cell (measured on the tiny Llama 2p1d: absolute delta-logprob "
        "up to 0.032 nats).",
    )
    state_families: list[str] = Field(
        ["gdn-hybrid", "mamba-hybrid"],
        description="KV families whose decode steps a recurrent state (GDN, Mamba) with another kernel than the "
        "chunked prefill: P/D greedy tokens are not bit-identical to one instance (vLLM's hybrid P/D test allows "
        "1.5 nats). A P/D cell of these families is judged with `token_gate: false`. Measured here on clean pairs: "
        "the tiny NemotronH flipped 3/8 greedy continuations, the tiny Qwen3-Next 1/9, against a token-exact null "
        "arm, while every teacher-forced gate (top-1 exact) passed.",
    )
    token_gate: bool = Field(
        True,
        description="Whether `tokens-vs-null` (greedy tokens against the null arm) gates; false: it is reported, and "
        "the teacher-forced gates (KL, |dlogprob|, top-1) and generation-KL judge the cell.",
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Deadline of one parity request.")


SECTION = CheckSection(ParityCheckConfig, "KV-fidelity parity.")
