"""The terminal view of a run: one row per cell with its verdict and check verdicts."""

from __future__ import annotations

from rich.table import Table

from canary.results import RunResult

CHECKS = ("startup", "parity", "accuracy", "throughput", "kv_transfer")


def render_grid(run: RunResult) -> Table:
    """A rich table of the run."""
    table = Table(title=f"run {run.run_id}: {run.counts()}")
    for column in ("cell", "verdict", *CHECKS, "reason"):
        table.add_column(column, overflow="fold")
    for result in run.cells:
        row = [result.cell.id, result.verdict]
        for name in CHECKS:
            check = result.check(name)
            row.append(check.verdict if check else "-")
        row.append(result.reason)
        table.add_row(*row)
    return table
