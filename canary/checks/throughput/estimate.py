"""The throughput check's time estimate: its load runs, each at most `max_duration_s`."""

from __future__ import annotations

from canary.checks.base import EstimateInput
from canary.plan.waves import RequestPhase


def estimate(inp: EstimateInput) -> float:
    """Per repeat: closed loop `ceil((num_requests + warmup) / concurrency)` rounds of `output_tokens`
    tokens, open loop `(num_requests + warmup) / request_rate` s and one request, at most `max_duration_s`."""
    load, model = inp.config.checks.throughput, inp.model
    requests = load.num_requests + load.warmup_requests
    if load.request_rate is not None:
        one = requests / load.request_rate + model.request_s + load.output_tokens * model.token_s
    else:
        one = RequestPhase("load", requests, load.output_tokens, load.concurrency).seconds(model)
    return load.repeats * min(float(load.max_duration_s), one)
