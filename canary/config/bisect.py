"""The `bisect:` section: whether `canary run` bisects its red cells itself, and the budget and the
confidence of every bisection (`canary bisect` and the automatic one; canary.bisect)."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveFloat

from canary.config.base import PositiveInt, Strict


class BisectConfig(Strict):
    """Whether a run bisects its red candidate cells, how many cell runs and minutes a bisection may
    spend on one cell, and how sure it must be."""

    enabled: bool = Field(
        False,
        description="After `canary run`, bisect each candidate-image cell that failed while the same cell on the "
        "baseline image passed, over its image's patch series (`images.<key>.patches`); the run's exit code "
        "stays its verdict's.",
    )
    max_cells: PositiveInt = Field(
        3,
        description="Automatic bisection (`enabled`): at most this many cells per run, in plan order; each gets "
        "the budget below.",
    )

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
