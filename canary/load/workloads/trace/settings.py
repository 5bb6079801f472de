"""The trace workload's settings (fields of checks.throughput.workload)."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import PositiveInt, Strict, WorkloadSection


class TraceSettings(Strict):
    """trace: replay a Mooncake-format request trace."""

    trace_path: str | None = Field(
        None,
        description="trace: the Mooncake-format JSONL file (one request a line; relative: from the working "
        "directory), read when the config loads; every worker of a distributed run reads it at this path.",
    )
    trace_time_scale: float = Field(
        1.0, gt=0, description="trace: multiplies the trace's arrival offsets (0.5: twice as fast)."
    )
    trace_block_tokens: PositiveInt = Field(
        512, description="trace: tokens per hash id (Mooncake: 512); equal ids get equal token blocks."
    )


def _needs_a_file(shape: object) -> str | None:
    return None if getattr(shape, "trace_path", None) else "workload kind trace needs trace_path"


WORKLOAD = WorkloadSection(
    TraceSettings,
    "trace: replay trace_path (Mooncake JSONL: timestamp ms, input_length, output_length, hash_ids)",
    problem=_needs_a_file,
    order=4,
)
