"""Which throughput metrics the history searches for change points, and the CheckResult.metrics
key (of the throughput check) that carries a recent worse change point to the exporters as
``canary_history_change_worse_ratio{metric=...}`` (canary/export/prometheus/schema.py). Import-light: the
schema reads it."""

from __future__ import annotations

TRACKED_CHECK = "throughput"
TRACKED: dict[str, str] = {
    "output_tokens_per_s": "output_tokens_per_s_change_worse_ratio",
    "requests_per_s": "requests_per_s_change_worse_ratio",
    "ttft_p50_s": "ttft_p50_s_change_worse_ratio",
    "tpot_p50_s": "tpot_p50_s_change_worse_ratio",
    "e2e_p50_s": "e2e_p50_s_change_worse_ratio",
    # the SLO capacity search's estimate (checks.throughput.capacity, off by default): a series only
    # where it ran, so a night-over-night capacity drop is found like a throughput one
    "capacity_requests_per_s": "capacity_requests_per_s_change_worse_ratio",
}
