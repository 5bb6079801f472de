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
    cells, err = _planned(capsys)
    assert cells == FIRST_RUN
    assert "matrix.select: 4 of 10 cells" in err and "--all" in err


def test_all_takes_every_cell_and_only_overrides_the_selection(capsys: pytest.CaptureFixture[str]) -> None:
    every, err = _planned(capsys, "--all")
    assert len(every) == 10 and FIRST_RUN < every and err == ""
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
