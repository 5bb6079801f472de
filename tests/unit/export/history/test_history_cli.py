"""`canary history import|show|changes` and `canary compare` through canary.cli.main."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from canary.cli import main
from canary.export.history.compare import compare_runs
from canary.export.history.store import open_store
from tests.support.synth import DEFAULT_SLOW, synth_history

SLOW = DEFAULT_SLOW[0]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "results"
    synth_history(root, runs=10)
    assert main(["history", "import", str(root), "--results-dir", str(root)]) == 0
    return root


def test_import_reports_what_it_did(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "import", str(results), "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"imported 10 runs into {results / 'history.sqlite'} (1800 metric rows)" in out


def test_show_a_cell_as_a_table_and_a_plot(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "tokens.svg"
    code = main(
        [
            "history",
            "show",
            "--cell",
            "agg.cpu_attn.b32.auto.v1.cand",
            "--plot",
            str(plot),
            "--results-dir",
            str(results),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert f"{SLOW}: throughput.output_tokens_per_s over 10 runs" in out
    assert out.count("change point") == 1
    assert "20261107T020000Z-synth" in out and " dropped 2" in out
    svg = ET.fromstring(plot.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{ns}circle")) == 10
    dashed = [line for line in svg.findall(f"{ns}line") if line.get("stroke-dasharray")]
    assert len(dashed) == 1
    title = dashed[0].find(f"{ns}title")
    assert title is not None and "at run 20261107T020000Z-synth" in (title.text or "")


def test_show_a_metric_across_cells(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "show", "--metric", "ttft_p50_s", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "throughput.ttft_p50_s: last 8 runs, every cell" in out
    assert out.count(".auto.v1.") == 6


def test_changes_lists_only_the_regression(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "changes", "--results-dir", str(results)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 5
    assert all(SLOW in line and "at run 20261107T020000Z-synth" in line for line in lines)


def test_compare_names_verdict_and_metric_changes(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "20261106", "20261107", "--min-change", "0.15", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "20261106T020000Z-synth -> 20261107T020000Z-synth" in out
    with open_store(sqlite=results / "history.sqlite") as store:
        result = compare_runs(store, "20261106T020000Z-synth", "20261107T020000Z-synth", 0.15)
    cell_changes = [v for v in result.verdicts if v.check == ""]
    # every candidate cell changed image; only the slow one changed verdict
    assert {v.cell_id for v in cell_changes} == {f"agg.cpu_attn.b{b}.auto.v1.candidate" for b in (16, 32, 128)}
    slow = next(v for v in cell_changes if v.cell_id == SLOW)
    assert (slow.before, slow.after, slow.worse) == ("pass", "fail", True)
    assert [(v.cell_id, v.check, v.before, v.after) for v in result.verdicts if v.check] == [
        (SLOW, "throughput", "pass", "fail")
    ]
    worse = {(m.cell_id, m.metric) for m in result.metrics if m.direction == "worse"}
    assert (SLOW, "output_tokens_per_s") in worse and (SLOW, "tpot_p50_s") in worse
    assert {m.cell_id for m in result.metrics if m.metric == "output_tokens_per_s"} == {SLOW}


def test_user_errors_are_one_line(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "nope", "latest", "--results-dir", str(results)]) == 2
    assert "canary: error:" in capsys.readouterr().err
    assert main(["history", "show", "--cell", "zzz", "--results-dir", str(results)]) == 2
    assert "no cell 'zzz'" in capsys.readouterr().err
    assert main(["history", "show", "--plot", "x.svg", "--results-dir", str(results)]) == 2
    assert "--plot needs --cell" in capsys.readouterr().err
    empty = results.parent / "nothing-here"
    assert main(["history", "changes", "--results-dir", str(empty)]) == 2
    assert f"no history at {empty / 'history.sqlite'}" in capsys.readouterr().err
    assert not empty.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["show", "--metric", "foo"], "no metric 'foo' of check throughput in the history; its metrics: "),
        (["show", "--metric", "ttft_p5_s", "--cell", "agg"], "did you mean ttft_p50_s? its metrics: "),
        (["changes", "--metric", "foo"], "no metric 'foo' of check throughput"),
        (["show", "--check", "thruput"], "no metrics of check 'thruput' in the history; checks with metrics: "),
    ],
)
def test_a_metric_the_history_does_not_hold_is_a_usage_error_listing_those_it_does(
    results: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    """`history show --metric foo` used to exit 0 with an empty table under a mangled title."""
    assert main(["history", *args, "--results-dir", str(results)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("canary: error: ") and said in line
    if "--metric" in args and "its metrics" in said:
        assert "output_tokens_per_s, " in line and "requests_per_s" in line
