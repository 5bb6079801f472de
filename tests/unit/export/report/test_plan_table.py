"""`canary plan` at the widths terminals have (80 and 120 columns), through the real CLI: no line is
wider than the terminal, and every value of every column is printed whole (the issue: the backend
squeezed to "CP", the runner blank). What every cell shares is said once; the rest per cell."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from canary.cli import NON_TTY_WIDTH, console_width
from canary.config.load import load_config
from canary.export.report.plan_table import PLAN_COLUMNS
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.matrix import plan


def _plan(width: int | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if width is not None:
        env["COLUMNS"] = str(width)
    return subprocess.run(
        [sys.executable, "-m", "canary", "plan", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def _cells(config: str, *only: str) -> list[Cell]:
    cells = plan(load_config(REPO_ROOT / config)).cells
    return [c for c in cells if not only or any(c.id.startswith(p) for p in only)]


WAVES = "waves within 16 GPUs"


def _blocks(lines: list[str], ids: list[str]) -> dict[str, str]:
    """Each cell's lines (from its id's line to the next id's), joined."""
    end = lines.index(WAVES) if WAVES in lines else len(lines)  # tonight's waves list the ids again
    lines = lines[:end]
    starts = {line.strip(): i for i, line in enumerate(lines) if line.strip() in ids}
    order = [*sorted(starts.values()), len(lines)]
    return {lines[s].strip(): "\n".join(lines[s:e]) for s, e in itertools.pairwise(order)}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize(
    ("config", "only"),
    [("configs/cpu-default.yaml", ()), ("configs/h200-mrv2-pd.yaml", ("pd.flashinfer.p128", "agg.flash"))],
)
def test_plan_prints_every_column_whole_within_the_terminal(width: int, config: str, only: tuple[str, ...]) -> None:
    result = _plan(width, config, *(a for p in only for a in ("--only", p)), *(() if only else ("--all",)))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= width
    cells = _cells(config, *only)
    shared = next((line for line in lines if line.startswith("every cell: ")), "")
    blocks = _blocks(lines, [c.id for c in cells])
    assert sorted(blocks) == sorted(c.id for c in cells)  # every id whole on a line of its own
    for cell in cells:
        block = blocks[cell.id]
        for header, value in PLAN_COLUMNS:
            pair = f"{header} {value(cell)}"
            if value(cell) != "-":  # a paragraph leaves out what is not there
                assert pair in shared or pair in block, (cell.id, pair)
        assert f"status {cell.status}" in block
        assert all(risk in block for risk in cell.risks)
        if cell.reason:  # the reason whole, wrapped at words
            assert " ".join(cell.reason.split()) in " ".join(block.split())


def test_cpu_default_says_once_what_every_cell_shares() -> None:
    lines = _plan(80, "configs/cpu-default.yaml").stdout.splitlines()
    assert "every cell: backend CPU_ATTN, kv dtype auto, runner v1" in lines
    assert not any(line.strip().startswith("backend ") for line in lines)  # not repeated per cell


def test_the_console_width_is_columns_then_the_terminal_then_120() -> None:
    assert console_width(tty=False, env={"COLUMNS": "80"}) == 80
    assert console_width(tty=True, env={"COLUMNS": "100"}) == 100
    assert console_width(tty=True, env={}) is None  # rich asks the terminal
    assert console_width(tty=False, env={"COLUMNS": "wide"}) == NON_TTY_WIDTH == 120


def test_tonights_waves_list_each_cell_id_whole_at_80_columns() -> None:
    """The waves table folded ids mid-word at 80 columns (`agg.flashinfer.b256.fp8.v1.b` / `aseline,`)."""
    import json

    result = _plan(80, "configs/h200-mrv2-pd.yaml")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = lines.index(WAVES)
    waves = json.loads(_plan(None, "configs/h200-mrv2-pd.yaml", "--json").stdout)["schedule"]["waves"]
    shown = [line.strip() for line in lines[start:]]
    for wave in waves:
        assert any(
            line.startswith(f"wave {wave['wave']}: {wave['gpus']} GPUs, {len(wave['cells'])} cells") for line in shown
        )
        assert all(cell in shown for cell in wave["cells"])
