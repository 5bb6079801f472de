"""The KV-transfer check's time estimate: its probe requests on a P/D cell."""

from __future__ import annotations

from canary.checks.base import EstimateInput
from canary.plan.waves import RequestPhase


def estimate(inp: EstimateInput) -> float | None:
    """`probe_requests` requests of 4 tokens, one at a time; nothing on an aggregated cell."""
    if inp.cell.topology != "pd-nixl":
        return None
    probes = inp.config.checks.kv_transfer.probe_requests
    return RequestPhase("probe requests", probes, 4, 1).seconds(inp.model)
