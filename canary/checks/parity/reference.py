"""The control's recorded reference for one parity prompt, and the evidence check on it.

A Reference holds the control's greedy generation (the *miss* arm, what P/D cells compare with),
its null comparisons (a prefix-cache hit in another batch composition vs a miss alone;
teacher-forced vs generated) and the comparison with the altered-first-block twin, which decides
whether the prompt is evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from canary.checks.parity.fidelity import Fidelity, Series, gap_from_json, series_from_json, series_to_json
from canary.checks.parity.prompts import ParityPrompt
from canary.config import ParityCheckConfig

CACHE_BATCH_ARM = "cache_batch"
"""Null comparison generation vs generation: a prefix-cache miss alone vs a hit inside a concurrent wave."""
LOAD_NULL_ARM = "load"
"""Null comparison generation vs generation: the control's miss alone vs its own sample inside the
throughput check's load run (parity under load, canary/checks/throughput/loadparity.py)."""
GEN_NULL_ARMS = (CACHE_BATCH_ARM, LOAD_NULL_ARM)
"""Null comparisons generation vs generation."""
FORCED_NULL_ARM = "forced"
"""Null comparison teacher-forced vs generated (the control's own output)."""


@dataclass
class Reference:
    """What the control measured for one prompt."""

    prompt: ParityPrompt
    miss: Series
    null: dict[str, Fidelity]
    dependence: Fidelity
    evidence: bool = False
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """Evidence row (the miss series is what P/D cells compare with)."""
        return {
            "length": self.prompt.length,
            "prompt_sha": self.prompt.sha,
            "first_item": self.prompt.first_item,
            "altered_tokens": self.prompt.altered_tokens,
            "output_ids": [p.token for p in self.miss],
            "series": series_to_json(self.miss),
            "null": {arm: f.to_json() for arm, f in self.null.items()},
            "dependence": self.dependence.to_json(),
            "evidence": self.evidence,
            "reason": self.reason,
        }


def thresholds(settings: ParityCheckConfig, refs: Sequence[Reference]) -> dict[str, float]:
    """Per-position thresholds from the null arm (for the dependence check and the localization)."""
    arms = [f for r in refs for f in r.null.values()]
    kl = max((f.max_kl for f in arms), default=0.0)
    dlp = max((f.max_abs_dlp for f in arms), default=0.0)
    return {
        "kl": settings.margin * kl + settings.kl_tolerance,
        "abs_dlp": settings.margin * dlp + settings.logprob_tolerance,
    }


def judge_evidence(settings: ParityCheckConfig, refs: Sequence[Reference]) -> None:
    """Mark each prompt as evidence (its output depends on its first block) or rejected, with why."""
    need = max(settings.dependence_min_nats, thresholds(settings, refs)["abs_dlp"])
    for ref in refs:
        dep = ref.dependence
        if dep.first_token_diff is not None:
            ref.evidence, ref.reason = True, f"altering the first block changes output token {dep.first_token_diff}"
        elif dep.max_abs_dlp >= need:
            ref.evidence = True
            ref.reason = f"altering the first block moves a generated logprob by {dep.max_abs_dlp:.3g} nats"
        else:
            ref.evidence = False
            ref.reason = (
                f"rejected: altering the first {ref.prompt.altered_tokens} tokens changes no output token and moves "
                f"logprobs by only {dep.max_abs_dlp:.3g} < {need:.3g} nats"
            )


def reference_from_evidence(rows: Sequence[dict[str, Any]], prompts: Sequence[ParityPrompt]) -> list[Reference]:
    """The control's recorded references for these prompts (matched by fingerprint)."""
    by_sha = {p.sha: p for p in prompts}
    refs = []
    for row in rows:
        prompt = by_sha.get(row.get("prompt_sha", ""))
        if prompt is None or "series" not in row:
            continue
        null = {arm: fidelity_from_json(f) for arm, f in row["null"].items()}
        ref = Reference(prompt, series_from_json(row["series"]), null, fidelity_from_json(row["dependence"]))
        ref.evidence, ref.reason = bool(row["evidence"]), str(row["reason"])
        refs.append(ref)
    return refs


def fidelity_from_json(row: dict[str, Any]) -> Fidelity:
    return Fidelity(
        [float(x) for x in row["kl"]],
        [float(x) for x in row["abs_dlp"]],
        [bool(x) for x in row["top1_agree"]],
        row["first_token_diff"],
        [gap_from_json(x) for x in row.get("disagree_gap", [])],
        None if row.get("first_diff_gap") is None else gap_from_json(row["first_diff_gap"]),
    )
