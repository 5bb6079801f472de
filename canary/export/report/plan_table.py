"""`canary plan`'s table: one row per cell, every column whole at any terminal width; tonight's waves.

What every cell shares (one backend, one kv dtype, one runner...) is said once above the table
instead of repeated in a column; the rest is a FittedTable (canary.export.report.terminal): a table
whose values are never cut when it fits, one paragraph per cell when the terminal is narrower.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from canary.config.catalog import DENSE_FAMILY
from canary.export.report.terminal import FittedTable
from canary.plan.cell import Cell
from canary.plan.matrix import Plan
from canary.plan.waves import Schedule


def _runner(cell: Cell) -> str:
    decode = cell.runner_for("decode")
    return cell.runner if decode == cell.runner else f"{cell.runner}/{decode}"


def _image(cell: Cell) -> str:
    return cell.image if not cell.mixed else f"{cell.image}/{cell.image_for('decode')}"


def _status(cell: Cell) -> str:
    return cell.status if cell.expect is None else f"{cell.status} (expect {cell.expect.expect})"


def _reason(cell: Cell) -> str:
    """Why a cell is not planned; for a planned one a known failure expects, the expectation's reason (its source:
    an upstream xfail config, a rewrite), so the plan says why the cell is expected to fail."""
    if cell.reason:
        return cell.reason
    if cell.expect is not None and cell.expect.expect != "pass":
        return f"expected: {cell.expect.reason}"
    return ""


PLAN_COLUMNS: tuple[tuple[str, Callable[[Cell], str]], ...] = (
    ("backend", lambda c: c.backend),
    ("P/D block", lambda c: c.block_label),
    ("kernel", lambda c: c.kernel_label),
    ("kv dtype", lambda c: c.kv_cache_dtype),
    ("runner", _runner),
    ("topology", lambda c: c.topology),
    ("image", _image),
    ("TP", lambda c: c.tp_shape if c.tp_shape_set else NO_TP),
    ("family", lambda c: c.family if c.family != DENSE_FAMILY else NO_FAMILY),
)
"""The columns that describe a cell (header, value): those every cell shares move above the table."""
NO_TP = "-"
"""The TP column of a cell whose every role runs one rank: a plan of such cells says nothing about TP."""
NO_FAMILY = "-"
"""The family column of a dense model's cell (one full-attention KV group): a dense plan says nothing about it."""


def shared_values(cells: tuple[Cell, ...]) -> dict[str, str]:
    """header -> value for the PLAN_COLUMNS every cell has the same value in (none for one cell or none)."""
    if len(cells) < 2:
        return {}
    shared = {}
    for header, value in PLAN_COLUMNS:
        values = {value(c) for c in cells}
        if len(values) == 1:
            shared[header] = values.pop()
    return shared


def plan_title(the_plan: Plan, shared: Mapping[str, str]) -> str:
    """`NAME on PLATFORM: N planned of M cells`, and what every cell shares."""
    planned, total = len(the_plan.planned()), len(the_plan.cells)
    title = f"{the_plan.config_name} on {the_plan.platform}: {planned} planned of {total} cells"
    said = {h: v for h, v in shared.items() if (h, v) not in {("TP", NO_TP), ("family", NO_FAMILY)}}
    if said:
        title += "\nevery cell: " + ", ".join(f"{header} {value}" for header, value in said.items())
    return title


def plan_table(the_plan: Plan, gpus: Mapping[str, int] | None = None) -> FittedTable:
    """The plan (with the GPUs each planned cell holds, when given): ids, values, risks and status are
    never cut; the reason gets the width left (whole in `canary plan --json`)."""
    cells = the_plan.cells
    shared = shared_values(cells)
    columns: list[tuple[str, tuple[str, ...]]] = [("cell", tuple(c.id for c in cells))]
    columns += [(h, tuple(value(c) for c in cells)) for h, value in PLAN_COLUMNS if h not in shared]
    if gpus is not None:
        columns.append(("GPUs", tuple(str(gpus.get(c.id, "-")) for c in cells)))
    columns.append(("risk", tuple(",".join(c.risks) or "-" for c in cells)))
    columns.append(("status", tuple(_status(c) for c in cells)))
    return FittedTable(
        title=plan_title(the_plan, shared),
        columns=tuple(columns),
        reasons=tuple(_reason(c) for c in cells),
        right=frozenset({"GPUs"}),
    )


def waves_view(schedule: Schedule) -> Group:
    """Tonight's waves, each a line (GPUs, cells, estimated minutes) and its cell ids one a line, whole at
    any width (a table folded the ids mid-word at 80 columns)."""
    lines: list[Text | Padding] = [Text(f"waves within {schedule.budget} GPUs", style="bold")]
    for wave in schedule.waves:
        lines.append(
            Text(
                f"wave {wave.index}: {wave.gpus} GPUs, {len(wave.cells)} cells, about {wave.typical_s / 60:.0f} min "
                f"({wave.worst_s / 60:.0f} min if every start takes its whole deadline)"
            )
        )
        lines += [Padding(Text(c.id), (0, 0, 0, 2)) for c in wave.cells]
    return Group(*lines)
