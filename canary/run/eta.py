"""The run's ETA, for the progress line of each cell: `cell 3/10: ID [planned], ETA 04:12 (about 5 min left)`.

Each planned cell is estimated from the plan (canary.checks.estimate: each enabled check's time on it,
plus an engine's start), and the estimates are scaled by what the cells so far really took against
their own estimates, counting only the checks that ran (a cell that failed to start costs its start).
The first cell's ETA is the plan's estimate; from the second on, this machine's pace corrects it.
Skipped and unsupported cells start nothing and cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from canary.checks.estimate import check_seconds
from canary.config import CanaryConfig
from canary.judge.results import CellResult
from canary.plan.cell import Cell

START_S = 60.0
"""An engine's start before any cell has run here (a Kubernetes target's: target.kubernetes.typical_start_s)."""


def start_seconds(config: CanaryConfig) -> float:
    """Seconds a cell's deployment is estimated to take before its checks."""
    return float(config.target.kubernetes.typical_start_s) if config.target.kind == "kubernetes" else START_S


@dataclass
class Eta:
    """Estimates per cell, corrected by the cells that finished."""

    checks: dict[str, dict[str, float]]
    """cell id -> check -> estimated seconds (planned cells only)."""
    start_s: float
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    started: float = field(default=0.0)
    spent_estimate_s: float = 0.0
    """What the finished cells were estimated to take, for the checks they ran."""
    finished: set[str] = field(default_factory=set)

    @classmethod
    def for_plan(
        cls,
        cells: Sequence[Cell],
        config: CanaryConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> Eta:
        """The estimates of a plan's cells, the clock started now."""
        planned = [c for c in cells if c.status == "planned"]
        memo: dict[str, object] = {}
        checks = {c.id: check_seconds(c, config, planned=planned, memo=memo) for c in planned}
        return cls(checks=checks, start_s=start_seconds(config), clock=clock, wall=wall, started=clock())

    def _estimate(self, cell_id: str, ran: Sequence[str] | None = None) -> float:
        if cell_id not in self.checks:
            return 0.0
        checks = self.checks[cell_id]
        return self.start_s + sum(s for name, s in checks.items() if ran is None or name in ran)

    def pace(self) -> float:
        """Real seconds per estimated second so far (1 before a cell has run)."""
        elapsed = self.clock() - self.started
        return elapsed / self.spent_estimate_s if self.spent_estimate_s > 0 else 1.0

    def remaining_s(self) -> float:
        """Seconds left for the cells not finished, at this run's pace."""
        left = sum(self._estimate(cell_id) for cell_id in self.checks if cell_id not in self.finished)
        return left * self.pace()

    def cell_done(self, result: CellResult) -> None:
        """A cell finished: what it ran counts towards the pace."""
        cell_id = result.cell.id
        if cell_id in self.checks and cell_id not in self.finished:
            self.finished.add(cell_id)
            self.spent_estimate_s += self._estimate(cell_id, [c.name for c in result.checks])

    def line(self) -> str:
        """`ETA 04:12 (about 5 min left)`, the clock time local; '' when nothing is left."""
        left = self.remaining_s()
        if left <= 0:
            return ""
        at = time.strftime("%H:%M", time.localtime(self.wall() + left))
        return f"ETA {at} (about {about(left)} left)"


def about(seconds: float) -> str:
    """A duration in words a person reads at a glance: '40 s', '5 min', '1.5 h'."""
    if seconds < 60:
        return f"{max(1, round(seconds / 10) * 10):.0f} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):.0f} min"
    return f"{seconds / 3600:.1f} h"
