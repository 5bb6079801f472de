"""The terminal view of a run (canary/export/report/terminal.py) at the widths terminals have: ids,
verdicts and check headers are never cut; the reason gets the width left, cut at a word with an
ellipsis; counts are words, not a Python dict. On the realistic sample run (tests/support/sample.py)."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from canary.export.report.terminal import CHECKS, cell_rows, checks_that_ran, number_rows, render_grid, verdict_counts
from canary.judge.results import RunResult
from tests.support.sample import sample_run


@pytest.fixture(scope="module")
def run() -> RunResult:
    return sample_run()


def _printed(renderable: object, width: int) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text().splitlines()


def test_counts_are_words_worst_first(run: RunResult) -> None:
    assert verdict_counts(run.counts()) == "3 fail, 1 error, 4 expected-fail, 6 pass, 2 unsupported"
    assert verdict_counts({}) == "no cells"
    title = _printed(render_grid(run), 220)
    assert any(line.startswith(f"run {run.run_id}: 3 fail, 1 error, ") for line in title)
    assert not any("{'" in line for line in title)


@pytest.mark.parametrize("width", [220, 180, 150])
def test_the_table_never_cuts_a_verdict_or_a_header_and_gives_the_reason_what_is_left(
    run: RunResult, width: int
) -> None:
    """The issue's run: `expected-fa...` and `start... pari...` while the reason got 100 characters."""
    lines = _printed(cell_rows(run), width)
    assert all(len(line) <= width for line in lines)
    header = next(line for line in lines if line.startswith("┃ cell"))
    ran = checks_that_ran(run)
    assert "lifecycle" in CHECKS and "lifecycle" not in ran  # off in the sample run: no column of dashes
    assert [h.strip() for h in header.strip("┃").split("┃")] == ["cell", "verdict", *ran, "reason"]
    for result in run.cells:
        row = next(line for line in lines if line.startswith(f"│ {result.cell.id} "))
        cell, verdict, *checks, reason = (part.strip() for part in row.strip("│").split("│"))
        assert cell == result.cell.id and verdict == result.verdict
        assert checks == [c.verdict if (c := result.check(name)) else "-" for name in ran]
        if reason != result.reason:  # cut: a whole-word prefix, then the ellipsis
            assert reason.endswith("…") and result.reason.startswith(reason[:-1]), (reason, result.reason)
            assert result.reason[len(reason) - 1] in " ,;:", (reason, result.reason)
    widest = max(len(line) for line in lines)
    assert widest >= width - 2  # the reason took the room there is


@pytest.mark.parametrize("width", [100, 80])
def test_too_narrow_for_a_table_each_cell_is_a_paragraph_with_nothing_cut(run: RunResult, width: int) -> None:
    text = "\n".join(_printed(render_grid(run), width))
    joined = " ".join(text.split())  # a reason the console wrapped reads as one again
    assert "…" not in text
    for result in run.cells:
        assert f"\n{result.cell.id}\n" in text
        assert f"verdict {result.verdict}" in text
        assert " ".join(result.reason.split()) in joined
    for name in checks_that_ran(run):
        assert f"{name} pass" in text


def test_the_numbers_are_a_table_when_they_fit(run: RunResult) -> None:
    lines = _printed(number_rows(run), 220)
    assert any(re.match(r"┃ cell +┃ ready in ┃", line) for line in lines)
    assert any("0.57 [0.47, 0.66] n=100" in line for line in lines)
