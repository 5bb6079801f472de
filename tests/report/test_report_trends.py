"""The reports compare a run with its history (canary.export.report.trends, read from a real SQLite history
written by canary.export.history.store): the banner says why, each cell shows its change against the
previous and the last good run and sparklines, the grid links to each cell's details, one GSM8K
column, plots that hatch invalid or corrupted cells instead of scaling to them, and data colours
that are not verdict colours. Without a history every cell says "no previous run"."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import reporthistory as h

from canary.config import HistoryConfig
from canary.core.svg import DATA_COLORS, NOT_TO_SCALE_FILL, NOT_TO_SCALE_STROKE, REFERENCE_COLOR
from canary.export.history import plot
from canary.export.history.rows import flatten
from canary.export.history.store import open_store
from canary.export.report import html, markdown, write_all
from canary.export.report.capacity import searches
from canary.export.report.grid import anchor
from canary.export.report.outcome import headline, not_passing
from canary.export.report.trends import NO_PREVIOUS, Trends, load_trends, read_trends
from canary.judge.results import RunResult
from canary.judge.verdicts import VERDICT_COLOR
from tests.support.sample import sample_run


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Trends, Path]:
    root = tmp_path_factory.mktemp("results")
    run, trends = h.with_history(root)
    return run, trends, root


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, re.S)


def test_each_cell_is_compared_with_its_previous_and_last_good_run(history: tuple[RunResult, Trends, Path]) -> None:
    _, trends, _ = history
    assert trends.runs_read == h.NIGHTS - 1 and trends.note == ""
    regressed = trends.of(h.REGRESSED)
    assert regressed.previous is not None and regressed.previous.run_id == h.run_id(h.NIGHTS - 1)
    assert regressed.last_good == regressed.previous  # it passed last night
    corrupted = trends.of(h.CORRUPTED)
    assert corrupted.previous is not None and corrupted.previous.verdict == "fail"
    assert corrupted.last_good is not None and corrupted.last_good.run_id == h.run_id(h.CORRUPTED_SINCE - 1)
    assert trends.of("pd.cpu_attn.p32-d32.auto.v1.candidate").last_good is None  # it never worked
    # seven earlier nights and tonight; night 4's invalid throughput is there but not judged
    starved = trends.of(h.INVALID_BEFORE).recent
    ttft = next(points for column, points in starved.items() if column.key == "ttft_p50_s")
    assert len(ttft) == h.NIGHTS and [p.judged for p in ttft].count(False) == 1 and not ttft[h.INVALID_NIGHT - 1].judged
    # the corrupted cell's speed since night 6 is not comparable; its GSM8K is
    recent = trends.of(h.CORRUPTED).recent
    speed = next(points for column, points in recent.items() if column.key == "requests_per_s")
    gsm8k = next(points for column, points in recent.items() if column.key == "accuracy")
    assert [p.judged for p in speed] == [True] * (h.CORRUPTED_SINCE - 1) + [False] * (h.NIGHTS - h.CORRUPTED_SINCE + 1)
    assert all(p.judged for p in gsm8k) and [round(p.value, 2) for p in gsm8k][-4:] == [0.57, 0.12, 0.12, 0.12]


def test_the_markdown_names_the_change_in_words(history: tuple[RunResult, Trends, Path]) -> None:
    run, trends, _ = history
    text = markdown.render(run, trends)
    row = next(line for line in text.splitlines() if line.startswith(f"| [`{h.REGRESSED}`]"))
    assert f"{h.run_id(h.NIGHTS - 1)}: verdict pass → fail; req/s 32.1 → 16.7 (-48%, worse)" in row
    assert "TTFT p50 88.8 ms → 171.1 ms (+93%, worse)" in row and "| the previous run |" in row
    row = next(line for line in text.splitlines() if line.startswith(f"| [`{h.CORRUPTED}`]"))
    assert f"{h.run_id(h.CORRUPTED_SINCE - 1)}: verdict pass → fail" in row
    assert "GSM8K 0.57 → 0.12 (-0.45, worse)" in row and "(not comparable: parity fail)" in row
    assert "| █████▁▁▁ |" in row  # GSM8K over eight nights: good for five, then the drop
    row = next(line for line in text.splitlines() if line.startswith(f"| [`{h.INVALID_TONIGHT}`]"))
    assert "verdict pass → invalid" in row and "(not comparable: throughput invalid)" in row
    assert re.search(r"\| [▁-█]{7}· \|", row)  # tonight's invalid value is a dot, not a level
    # the banner: the outcome line, then every cell that kept the run from passing, linked
    lines = text.splitlines()
    assert lines[2] == f"**{headline(run)}**"
    assert lines[2].startswith(
        f"**FAILED: 3 cells failed: {h.CORRUPTED} parity: greedy tokens identical to the control for 80% of prompts"
    )
    assert f"- [`{h.INVALID_TONIGHT}`](#{anchor(h.INVALID_TONIGHT)}) ❓ invalid: client CPU-starved" in lines
    why = "throughput: 17.1 req/s vs baseline 31.0 req/s (55%)"
    assert f"- [`{h.REGRESSED}`](#{anchor(h.REGRESSED)}) ❌ fail: {why}" in lines


def test_every_grid_and_table_link_lands_on_a_cell(history: tuple[RunResult, Trends, Path]) -> None:
    run, trends, _ = history
    page = html.render(run, trends)
    ids = set(re.findall(r" id='([^']+)'", page))
    links = re.findall(r"href='#([^']+)'", page)
    assert {anchor(c.cell.id) for c in run.cells} <= ids
    # grid, cells table and changes table link each cell, the banner each cell that did not pass and
    # each that failed as expected, the capacity section each cell it did not search
    expected = [c for c in run.cells if c.verdict == "expected-fail"]
    unsearched = [x for x in searches(run) if x.skipped]
    assert (
        len(links) == 3 * len(run.cells) + len(not_passing(run)) + len(expected) + len(unsearched) == 3 * 16 + 5 + 4 + 1
    )
    assert set(links) <= ids
    heatmaps = [svg for svg in _svgs(page) if "<a href='#cell-" in svg]
    assert len(heatmaps) == 4
    text = markdown.render(run, trends)
    md_ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) == md_ids == {anchor(c.cell.id) for c in run.cells}


def test_one_gsm8k_column_with_interval_and_n(history: tuple[RunResult, Trends, Path]) -> None:
    run, trends, _ = history
    page = html.render(run, trends)
    table = re.search(r"<h2>Cells</h2>(.*?)</table>", page, re.S)
    assert table is not None
    headers = re.findall(r"<th>([^<]*)</th>", table.group(1))
    assert [x for x in headers if "GSM8K" in x] == ["GSM8K [Wilson] n"]
    assert "<td class='num'>0.12 [0.07, 0.20] n=100</td>" in table.group(1)


def test_plots_hatch_invalid_and_corrupted_cells_instead_of_scaling_to_them(
    history: tuple[RunResult, Trends, Path],
) -> None:
    run, trends, _ = history
    ttft = next(svg for svg in _svgs(html.render(run, trends)) if "<title>TTFT p50" in svg)
    ET.fromstring(ttft)
    starved = next(c for c in run.cells if c.cell.id == h.INVALID_TONIGHT).check("throughput")
    assert starved is not None
    starved_ms = starved.metrics["ttft_p50_s"] * 1000
    ticks = [float(t) for t in re.findall(r"text-anchor='middle'>([0-9.]+)</text>", ttft)]
    assert max(ticks) < starved_ms / 1.5  # the axis ends well below the invalid value
    assert f"throughput invalid: {starved_ms:.0f} ms, not comparable" in ttft
    assert "parity fail: " in ttft and "kv_transfer fail: " in ttft  # corrupted cells: not comparable
    assert ttft.count("class='not-to-scale'") == 3 and "<path d=" in ttft  # the arrow: cut at the axis end
    # the same cells, scaled to, would have stretched the axis past the invalid value
    clean = html.render(sample_run(), Trends())
    assert "not comparable" in clean  # the sample's corrupted cells too, without any history


def test_data_colours_are_not_verdict_colours(history: tuple[RunResult, Trends, Path]) -> None:
    def rgb(colour: str) -> tuple[int, int, int]:
        return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)

    def distance(a: str, b: str) -> float:
        return float(sum((x - y) ** 2 for x, y in zip(rgb(a), rgb(b), strict=True)) ** 0.5)

    verdicts = set(VERDICT_COLOR.values())
    for colour in (*DATA_COLORS, NOT_TO_SCALE_FILL, NOT_TO_SCALE_STROKE, REFERENCE_COLOR):
        assert colour not in verdicts, colour
    for colour in DATA_COLORS:  # and none looks like one
        assert min(distance(colour, v) for v in verdicts) >= 60, colour
    assert not {plot.LINE, plot.CHANGE, plot.UNJUDGED} & verdicts  # `canary history show --plot` too
    run, trends, _ = history
    page = html.render(run, trends)
    charts = [svg for svg in _svgs(page) if "<a href='#cell-" not in svg]  # all but the verdict heatmaps
    sparklines = [svg for svg in charts if "over the last" in svg]
    assert len(sparklines) >= 20
    used = {c.lower() for svg in sparklines for c in re.findall(r"#[0-9a-fA-F]{6}", svg)}
    assert not used & verdicts and used & set(DATA_COLORS)
    for svg in charts:
        if "GSM8K accuracy" in svg:  # a failed accuracy check is shown in the fail verdict's colour
            svg = svg.replace(f"fill='{VERDICT_COLOR['fail']}'", "")
        assert not {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}", svg)} & verdicts


def test_without_a_history_the_report_says_no_previous_run_once(tmp_path: Path) -> None:
    run = sample_run()
    written = write_all(run, tmp_path)  # no trends at all
    text = (tmp_path / "summary.md").read_text(encoding="utf-8")
    page = (tmp_path / "summary.html").read_text(encoding="utf-8")
    assert [p.name for p in written] == ["results.json", "junit.xml", "summary.md", "summary.html"]
    rows = [line for line in text.splitlines() if line.startswith("| [`")]
    assert len(rows) == len(run.cells) and all(f"| {NO_PREVIOUS} | {NO_PREVIOUS} |" in row for row in rows)
    # the page says it once, in the Changes section, not once per cell and column
    changes = page.split("<h2>Changes</h2>", 1)[1].split("<h2>", 1)[0]
    assert changes.count(NO_PREVIOUS) == 1 and "<table" not in changes
    assert f"{NO_PREVIOUS} for any of the {len(run.cells)} cells" in changes
    assert page.count(NO_PREVIOUS) == 2  # and the banner's history line
    # the configured history: missing, disabled, unreadable -> a note, never an exception
    missing = load_trends(run, HistoryConfig(), tmp_path)
    assert missing.cells == {} and missing.note.startswith("no run history to compare with: no history at ")
    assert "export.history.enabled: false" in load_trends(run, HistoryConfig(enabled=False), tmp_path).note
    (tmp_path / "broken.sqlite").write_text("not a database", encoding="utf-8")
    broken = load_trends(run, HistoryConfig(path="broken.sqlite"), tmp_path)
    assert broken.cells == {} and "broken.sqlite" in broken.note
    assert broken.note in html.render(run, broken) and broken.note in markdown.render(run, broken)


def test_a_first_run_in_the_history_has_no_previous_run(tmp_path: Path) -> None:
    run = sample_run()
    with open_store(sqlite=tmp_path / "history.sqlite") as store:
        store.write(flatten(run))
    trends = load_trends(run, HistoryConfig(), tmp_path)
    assert trends.note == "" and trends.runs_read == 0
    assert all(t.previous is None and t.recent == {} for t in trends.cells.values())
    assert f"{NO_PREVIOUS}: this is the first run of cpu-default in the history" in markdown.render(run, trends)
    # another config's runs are not this one's history
    other = sample_run(run_id="20200101T000000Z-other-1").model_copy(update={"config_name": "other"})
    with open_store(sqlite=tmp_path / "history.sqlite") as store:
        store.write(flatten(other))
        assert read_trends(store, run).runs_read == 0
