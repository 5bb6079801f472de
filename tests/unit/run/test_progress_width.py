"""Progress lines fit the terminal (the issue: `=> PASS` lines ran to 1,000 characters): cut at a word
with an ellipsis at $COLUMNS; into a file or pipe (no terminal, no $COLUMNS) they stay whole."""

from __future__ import annotations

import io

import pytest

from canary.core.term import fit, terminal_width
from canary.run.cells import default_progress

REASON = "throughput: " + ", ".join(f"ttft p{p} {p * 0.011:.3f}s within the gate of the baseline" for p in range(40))


@pytest.mark.parametrize("width", [80, 120])
def test_a_long_verdict_line_is_cut_to_the_terminal(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    default_progress(f"cell 3/10: pd.cpu_attn.p32-d32.auto.v1.baseline => PASS {REASON}")
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) <= width and line.endswith("…")
    assert "pd.cpu_attn.p32-d32.auto.v1.baseline => PASS throughput" in line  # the id and verdict whole


def test_into_a_file_the_line_stays_whole(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    default_progress(f"x => PASS {REASON}")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(REASON)


def test_the_width_is_columns_then_the_terminal_then_none() -> None:
    assert terminal_width(io.StringIO(), {"COLUMNS": "90"}) == 90
    assert terminal_width(io.StringIO(), {}) is None  # not a terminal
    assert fit("a b c", None) == "a b c" and fit("alpha beta gamma", 12) == "alpha beta…"
