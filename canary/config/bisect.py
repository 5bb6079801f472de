"""The `bisect:` section: the budget and the confidence of `canary bisect` (canary.bisect)."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveFloat

from canary.config.base import PositiveInt, Strict


class BisectConfig(Strict):
    """How many cell runs and minutes `canary bisect` may spend on one cell, and how sure it must be."""

    max_runs: PositiveInt = Field(
        12, description="Cell runs in all (endpoints, search and confirmation); spent: the result is inconclusive."
    )
    max_minutes: PositiveFloat | None = Field(
        120.0, description="Wall time in all; no step starts after it (null: no limit)."
    )
    retries: NonNegativeInt = Field(
        2, description="More runs of a step whose verdict was invalid or error, before the step is skipped."
    )
    confirm: PositiveInt = Field(
        1,
        description="Agreeing runs each side of the boundary (and of the bad end, the bisected run included) "
        "needs; 1 suits faults that fire every run, 3+ a fault that fires on some runs only.",
    )
