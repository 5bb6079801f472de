"""Named load workloads: the shape of the requests a load run sends, beyond fixed synthetic lengths.

One model, used by the throughput check's config (checks.throughput.workload) and by the load
client's WorkloadSpec (canary.load.workload), so both read the same fields. The request plans are
built in canary/load/shapes.py; docs/methodology/throughput.md ("Workloads") explains each kind.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from canary.config.base import PositiveInt, Strict

WorkloadKind = Literal["synthetic", "shared_prefix", "multi_turn", "block_residues", "trace"]


class WorkloadShape(Strict):
    """What each request of a load run looks like (seeded: the same seed gives the same requests)."""

    kind: WorkloadKind = Field(
        "synthetic",
        description="synthetic: fresh prompts of prompt_tokens (length_distribution); shared_prefix: prefix_groups "
        "groups, each a common prefix of prefix_tokens then a fresh suffix of prompt_tokens, requests interleaved "
        "across groups; multi_turn: conversations of `turns` turns, each turn's prompt the previous prompt, the "
        "previous output's length in stand-in tokens and prompt_tokens new ones, each sent after the previous one "
        "finished (open loop: conversations start on the schedule, request_rate conversations/s); "
        "block_residues: prompt lengths k*B-1, k*B, k*B+1 for every B in block_sizes and k in block_multiples, in "
        "turn; trace: replay trace_path (Mooncake JSONL: timestamp ms, input_length, output_length, hash_ids).",
    )
    prefix_groups: PositiveInt = Field(4, description="shared_prefix: number of groups (distinct prefixes).")
    prefix_tokens: PositiveInt = Field(256, description="shared_prefix: tokens of each group's common prefix.")
    turns: int = Field(3, ge=2, description="multi_turn: turns per conversation.")
    think_time_s: float = Field(
        0.0,
        ge=0,
        description="multi_turn, open loop: mean think time (exponential, seeded) between a turn's end and the "
        "conversation's next turn; 0: none. The closed loop sends the next turn at once.",
    )
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

    @model_validator(mode="after")
    def _trace_has_a_file(self) -> WorkloadShape:
        if self.kind == "trace" and not self.trace_path:
            raise ValueError("workload kind trace needs trace_path")
        return self


def arrival_problem(shape: WorkloadShape, open_loop: bool, request_rate: float | None) -> str | None:
    """Why this workload cannot run with these arrivals (None: it can)."""
    if open_loop and request_rate is None and shape.kind != "trace":
        return "open_loop needs a request_rate (or a trace workload, whose arrivals come from the file)"
    if not open_loop and shape.kind == "multi_turn" and shape.think_time_s > 0:
        return "multi_turn think_time_s needs open_loop (the closed loop's users send the next turn at once)"
    return None
