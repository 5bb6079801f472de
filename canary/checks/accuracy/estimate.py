"""The accuracy check's time estimate: every question, `num_concurrent` at a time (no early stop)."""

from __future__ import annotations

from canary.checks.base import EstimateInput
from canary.plan.waves import RequestPhase


def estimate(inp: EstimateInput) -> float:
    """`ceil(limit / num_concurrent)` rounds of `max_gen_toks` tokens."""
    settings = inp.config.checks.accuracy
    return RequestPhase("questions", settings.limit, settings.max_gen_toks, settings.num_concurrent).seconds(inp.model)
