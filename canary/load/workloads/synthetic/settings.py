"""The synthetic workload's settings: none of its own (the throughput check's lengths and distribution)."""

from __future__ import annotations

from canary.config.base import Strict, WorkloadSection


class SyntheticSettings(Strict):
    """synthetic: no fields of its own (canary.load.workload draws its requests itself)."""


WORKLOAD = WorkloadSection(
    SyntheticSettings,
    "synthetic: fresh prompts of prompt_tokens (length_distribution)",
    order=0,
)
