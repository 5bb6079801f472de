"""Each check's time on a cell, read from the registry: what run/ and the CLI give the GPU wave packing.

canary.plan.waves packs cells into waves by these numbers but cannot import the checks (plan sits
below checks in canary.LAYERS); every registered check declares its own estimate (`register(estimate=)`),
and a disabled check (its section's `enabled: false`) costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from canary.checks.base import EstimateInput, specs
from canary.config import CanaryConfig
from canary.plan.cell import Cell
from canary.plan.waves import DEFAULT_MODEL, EstimateModel


def check_seconds(
    cell: Cell,
    config: CanaryConfig,
    model: EstimateModel = DEFAULT_MODEL,
    planned: Sequence[Cell] | None = None,
    memo: dict[str, object] | None = None,
) -> dict[str, float]:
    """Estimated seconds of each enabled check of a started cell, in check order (startup's wait is the
    wave's). `planned`: the cells planned with it (a P/D cell whose aggregated control is not among them
    measures its parity reference itself); None: its control is planned."""
    shared: dict[str, object] = {} if memo is None else memo
    out: dict[str, float] = {}
    for name, spec in specs().items():
        if not getattr(getattr(config.checks, name), "enabled", True):
            continue
        seconds = spec.estimate(EstimateInput(cell, config, model, planned, shared))
        if seconds is not None:
            out[name] = round(seconds, 1)
    return out


def cell_check_seconds(
    cell: Cell, config: CanaryConfig, model: EstimateModel = DEFAULT_MODEL, planned: Sequence[Cell] | None = None
) -> float:
    """All checks of one cell, seconds (arguments: check_seconds)."""
    return sum(check_seconds(cell, config, model, planned).values())


def checks_by_cell(
    cells: Sequence[Cell], planned: Sequence[Cell], config: CanaryConfig, model: EstimateModel = DEFAULT_MODEL
) -> dict[str, float]:
    """Cell id -> seconds of its checks (canary.plan.waves.Estimator); a P/D cell whose aggregated control
    is not in `planned` measures its parity reference itself."""
    memo: dict[str, object] = {}
    return {c.id: sum(check_seconds(c, config, model, planned, memo).values()) for c in cells}
