"""The terminal view of a run: the matrix grids (as in summary.md) and one row per cell with its numbers."""

from __future__ import annotations

from typing import get_args

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from canary.config import CheckName
from canary.export.report.grid import DETAIL_COLUMNS, Section, cell_value, sections
from canary.export.report.outcome import headline
from canary.judge.results import RunResult
from canary.judge.verdicts import OUTCOME_RICH_STYLE, VERDICT_RICH_STYLE

CHECKS: tuple[str, ...] = get_args(CheckName)


def _verdict(verdict: str) -> Text:
    return Text(verdict, style=VERDICT_RICH_STYLE.get(verdict, ""))


def _grid(section: Section) -> Table:
    table = Table(title=section.title, title_justify="left", min_width=len(section.title) + 4)
    table.add_column("block")
    for column in section.columns:
        table.add_column(column)
    for row in section.rows:
        values: list[RenderableType] = [row]
        for column in section.columns:
            text = Text()
            for index, entry in enumerate(section.at(row, column)):
                if index:
                    text.append("\n")
                text.append(entry.verdict, style=VERDICT_RICH_STYLE.get(entry.verdict, ""))
                if entry.variant:
                    text.append(f" {entry.variant}")
            values.append(text)
        table.add_row(*values)
    return table


def _cells(run: RunResult) -> Table:
    """Verdicts: one row per cell, each check's verdict and the reason (cut; summary.md has it whole)."""
    table = Table(title=f"run {run.run_id}: {run.counts()}", title_justify="left")
    for column in ("cell", "verdict", *CHECKS):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=100)
    for result in run.cells:
        row: list[RenderableType] = [result.cell.id, _verdict(result.verdict)]
        for name in CHECKS:
            check = result.check(name)
            row.append(_verdict(check.verdict) if check else "-")
        row.append(result.reason)
        table.add_row(*row)
    return table


def _numbers(run: RunResult) -> Table:
    """The measured numbers per cell (time to ready, load, accuracy, parity, NIXL bytes)."""
    table = Table(title="numbers", title_justify="left")
    table.add_column("cell", no_wrap=True)
    for column in DETAIL_COLUMNS:
        table.add_column(column.header, justify="right")
    for result in run.cells:
        table.add_row(result.cell.id, *(cell_value(result, c) for c in DETAIL_COLUMNS))
    return table


def render_grid(run: RunResult) -> Group:
    """The matrix grids per image and topology, then the per-cell verdicts and numbers."""
    return Group(*(_grid(section) for section in sections(run)), _cells(run), _numbers(run))


def outcome_line(run: RunResult) -> Text:
    """The run's outcome in one styled line (OK / INCONCLUSIVE / FAILED and why): `canary run`'s last line."""
    return Text(headline(run), style=OUTCOME_RICH_STYLE[run.outcome])
