"""Which cells a command takes (canary/plan/selection.py), through `canary plan --json` as a user runs it:
the embedded default's matrix.select (its first run), --all, --only, and a select naming no cell."""

from __future__ import annotations

import json

import pytest

from canary.cli import main
from canary.paths import REPO_ROOT

DEFAULT = str(REPO_ROOT / "configs/cpu-default.yaml")
FIRST_RUN = {
    "agg.cpu_attn.b128.auto.v1.baseline",
    "pd.cpu_attn.p128-d128.auto.v1.baseline",
    "pd.cpu_attn.p32-d64.auto.v1.baseline",
    "pd.cpu_attn.p128-d128.auto.v1.kernel32",
}


def _planned(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[set[str], str]:
    assert main(["plan", DEFAULT, "--json", *args]) == 0
    out = capsys.readouterr()
    return {c["id"] for c in json.loads(out.out)["cells"]}, out.err


def test_the_defaults_first_run_takes_its_selected_cells_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    cells, _ = _planned(capsys)
    assert cells == FIRST_RUN
    assert main(["plan", DEFAULT]) == 0  # the table says how the cells were chosen
    table = capsys.readouterr().out
    assert "matrix.select: 4 of 10 cells" in table and "--all" in table
    assert "agg.cpu_attn.b16" not in table


def test_all_takes_every_cell_and_only_overrides_the_selection(capsys: pytest.CaptureFixture[str]) -> None:
    every, err = _planned(capsys, "--all")
    assert len(every) == 10 and every > FIRST_RUN and err == ""
    named, _ = _planned(capsys, "--only", "agg.cpu_attn.b16")
    assert named == {"agg.cpu_attn.b16.auto.v1.baseline"}  # not in the selection: --only wins
    unselected, _ = _planned(capsys, "--set", "matrix.select=[]")
    assert unselected == every


def test_a_selected_id_that_is_no_cell_exits_2_naming_the_key_and_the_closest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", DEFAULT, "--set", "matrix.select=[agg.cpu_attn.b128.auto.v1.baselin]"]) == 2
    err = capsys.readouterr().err
    assert "matrix.select" in err and "agg.cpu_attn.b128.auto.v1.baseline" in err


def test_a_matrix_narrowed_past_the_selection_names_the_missing_ids_or_refuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    narrowed = ["--set", "matrix.prefill_block_sizes=[16, 32]"]  # no block-128 cells but the included ones
    assert main(["plan", DEFAULT, *narrowed]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the note wraps at the terminal's width
    assert "matrix.select: 2 of 8 cells" in out
    assert "not in this matrix: agg.cpu_attn.b128.auto.v1.baseline (closest: " in out
    none_left = [*narrowed, "--set", "matrix.select=[agg.cpu_attn.b128.auto.v1.baseline]"]
    assert main(["plan", DEFAULT, *none_left]) == 2
    assert "matrix.select: takes none of this matrix's 8 cells" in capsys.readouterr().err
