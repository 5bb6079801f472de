"""The shared_prefix workload's settings (fields of checks.throughput.workload)."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import PositiveInt, Strict, WorkloadSection


class SharedPrefixSettings(Strict):
    """shared_prefix: groups of requests that share a common prefix."""

    prefix_groups: PositiveInt = Field(4, description="shared_prefix: number of groups (distinct prefixes).")
    prefix_tokens: PositiveInt = Field(256, description="shared_prefix: tokens of each group's common prefix.")


WORKLOAD = WorkloadSection(
    SharedPrefixSettings,
    "shared_prefix: prefix_groups groups, each a common prefix of prefix_tokens then a fresh suffix of "
    "prompt_tokens, requests interleaved across groups",
    order=1,
)
