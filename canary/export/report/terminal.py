"""The terminal view of a run: the matrix grids (as in summary.md) and one row per cell with its numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from canary.checks.base import check_order
from canary.core.words import cut
from canary.export.report.grid import (
    DETAIL_COLUMNS,
    NOT_COMPARABLE,
    NOT_COMPARABLE_SHORT,
    NOT_COMPARABLE_WHY,
    Section,
    cell_value,
    sections,
)
from canary.export.report.outcome import headline
from canary.judge.results import RunResult
from canary.judge.verdicts import OUTCOME_RICH_STYLE, SEVERITY_ORDER, VERDICT_RICH_STYLE

CHECKS: tuple[str, ...] = check_order()


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


def verdict_counts(counts: Mapping[str, int]) -> str:
    """Cells per verdict in words, worst first: '3 fail, 1 error, 6 pass' (never a Python dict)."""
    return ", ".join(f"{counts[v]} {v}" for v in SEVERITY_ORDER if counts.get(v)) or "no cells"


MIN_REASON = 20
"""The narrowest reason column a table keeps; below it each row is a paragraph instead."""
BORDERS = 3
"""Characters a column adds to a rich table (padding and rule); one more closes the table."""


@dataclass(frozen=True)
class FittedTable:
    """A table whose columns are never cut (ids, verdicts, headers, numbers), with an optional last
    column of reasons that gets the width left, cut at a word with an ellipsis. Too narrow for that,
    each row is a paragraph: its first value, then `header value` pairs, then the whole reason."""

    title: str
    columns: tuple[tuple[str, tuple[str, ...]], ...]
    """(header, one value per row); the first column names the row."""
    reasons: tuple[str, ...] | None = None
    verdicts: frozenset[str] = frozenset()
    """Headers whose values are verdicts (styled as such)."""
    right: frozenset[str] = frozenset()
    """Headers whose values are right-justified (numbers)."""

    def widths(self) -> list[int]:
        """Each column's width: its longest value or its header."""
        return [max(len(header), *(len(v) for v in values)) for header, values in self.columns]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fixed = sum(w + BORDERS for w in self.widths()) + 1
        room = options.max_width - fixed - BORDERS
        fits = room >= MIN_REASON if self.reasons is not None else fixed <= options.max_width
        yield self.table(room) if fits else self.paragraphs(options.max_width)

    def _value(self, header: str, value: str) -> Text:
        return _verdict(value) if header in self.verdicts else Text(value)

    def table(self, reason_width: int) -> Table:
        """One row per entry; the reasons (if any) cut to reason_width."""
        table = Table(title=self.title, title_justify="left")
        for (header, _), width in zip(self.columns, self.widths(), strict=True):
            justify: JustifyMethod = "right" if header in self.right else "left"
            table.add_column(header, no_wrap=True, min_width=width, justify=justify)
        if self.reasons is not None:
            table.add_column("reason", no_wrap=True, max_width=reason_width)
        for index in range(len(self.columns[0][1])):
            row: list[RenderableType] = [self._value(h, values[index]) for h, values in self.columns]
            if self.reasons is not None:
                row.append(cut(self.reasons[index], reason_width))
            table.add_row(*row)
        return table

    def paragraphs(self, width: int) -> Group:
        """Per row: its name, its other columns as `header value` pairs, its whole reason."""
        lines: list[RenderableType] = [Text(self.title)]
        (_, names), *others = self.columns
        for index, name in enumerate(names):
            lines.append(Text(name, style="bold"))
            pairs = [Text(f"{h} ").append_text(self._value(h, v[index])) for h, v in others if v[index] != "-"]
            lines += [Padding(line, (0, 0, 0, 2)) for line in _packed(pairs, width - 2)]
            if self.reasons is not None and self.reasons[index]:
                lines.append(Padding(Text(self.reasons[index]), (0, 0, 0, 2)))
        return Group(*lines)


def _packed(pieces: list[Text], width: int, gap: str = "  ") -> list[Text]:
    """The pieces on as few lines of `width` as fit, never one split across two (one wider than a
    line gets a line of its own, and the console wraps it)."""
    lines: list[Text] = []
    for piece in pieces:
        if lines and len(lines[-1]) + len(gap) + len(piece) <= width:
            lines[-1].append(gap).append_text(piece)
        else:
            lines.append(piece.copy())
    return lines


def cell_rows(run: RunResult) -> FittedTable:
    """Verdicts: one row per cell, the verdict of each check that ran on some cell (a check off in this run,
    such as the lifecycle check by default, gets no column), and the reason (cut; summary.md has it whole)."""
    cells = run.cells
    columns = [("cell", tuple(r.cell.id for r in cells)), ("verdict", tuple(r.verdict for r in cells))]
    names = checks_that_ran(run)
    for name in names:
        columns.append((name, tuple(c.verdict if (c := r.check(name)) else "-" for r in cells)))
    return FittedTable(
        title=f"run {run.run_id}: {verdict_counts(run.counts())}",
        columns=tuple(columns),
        reasons=tuple(r.reason for r in cells),
        verdicts=frozenset(("verdict", *names)),
    )


def checks_that_ran(run: RunResult) -> tuple[str, ...]:
    """The checks with a result on some cell of the run, in check order."""
    return tuple(name for name in CHECKS if any(r.check(name) is not None for r in run.cells))


def number_rows(run: RunResult) -> FittedTable:
    """The measured numbers per cell (time to ready, load, accuracy, parity, NIXL bytes)."""
    columns = [("cell", tuple(r.cell.id for r in run.cells))]
    columns += [(c.header, tuple(cell_value(r, c, short=True) for r in run.cells)) for c in DETAIL_COLUMNS]
    title = "numbers"
    if any(f"({NOT_COMPARABLE_SHORT})" in v for _, values in columns for v in values):
        title += f" ({NOT_COMPARABLE_SHORT}: {NOT_COMPARABLE}: {NOT_COMPARABLE_WHY})"
    return FittedTable(title=title, columns=tuple(columns), right=frozenset(c.header for c in DETAIL_COLUMNS))


def render_grid(run: RunResult) -> Group:
    """The matrix grids per image and topology, then the per-cell verdicts and numbers."""
    return Group(*(_grid(section) for section in sections(run)), cell_rows(run), number_rows(run))


def outcome_line(run: RunResult) -> Text:
    """The run's outcome in one styled line (OK / INCONCLUSIVE / FAILED and why): `canary run`'s last line."""
    return Text(headline(run), style=OUTCOME_RICH_STYLE[run.outcome])
