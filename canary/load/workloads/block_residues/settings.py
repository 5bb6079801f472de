"""The block_residues workload's settings (fields of checks.throughput.workload)."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import PositiveInt, Strict, WorkloadSection


class BlockResiduesSettings(Strict):
    """block_residues: prompt lengths around multiples of the KV block sizes."""

    block_sizes: list[PositiveInt] | None = Field(
        None,
        min_length=1,
        description="block_residues: KV block sizes B in tokens. None: the cell's own, filled in by the throughput "
        "check: its logical block(s) (prefill and decode) and its kernel block(s), as the engine reported them at "
        "startup where it did, else as the catalog / config declares them.",
    )
    block_multiples: list[PositiveInt] = Field(
        [1, 2], min_length=1, description="block_residues: the k of the lengths k*B-1, k*B and k*B+1."
    )


WORKLOAD = WorkloadSection(
    BlockResiduesSettings,
    "block_residues: prompt lengths k*B-1, k*B, k*B+1 for every B in block_sizes and k in block_multiples, in turn",
    order=3,
)
