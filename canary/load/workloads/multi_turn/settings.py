"""The multi_turn workload's settings (fields of checks.throughput.workload)."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import Strict, WorkloadSection


class MultiTurnSettings(Strict):
    """multi_turn: conversations whose turns grow the previous prompt."""

    turns: int = Field(3, ge=2, description="multi_turn: turns per conversation.")
    think_time_s: float = Field(
        0.0,
        ge=0,
        description="multi_turn, open loop: mean think time (exponential, seeded) between a turn's end and the "
        "conversation's next turn; 0: none. The closed loop sends the next turn at once.",
    )


WORKLOAD = WorkloadSection(
    MultiTurnSettings,
    "multi_turn: conversations of `turns` turns, each turn's prompt the previous prompt, the previous output's "
    "length in stand-in tokens and prompt_tokens new ones, each sent after the previous one finished (open loop: "
    "conversations start on the schedule, request_rate conversations/s)",
    order=2,
)
