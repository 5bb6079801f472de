"""The capacity section of summary.html and summary.md on the sample run (tests/support/sample.py: real
capacity searches against a synthetic server): one latency-vs-rate SVG per cell that searched, with its
words inside the SVG, every probe drawn in every panel, each SLO limit drawn where its value lies on
the panel's scale, the estimate and interval marked (a missing end honestly open), and the
disaggregation gain table with its assumption; a line per cell in Markdown."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from canary.core.svg_rate import LEFT, RIGHT, WIDTH
from canary.export.report import capacity as c
from canary.export.report import html as html_report
from canary.export.report import markdown
from canary.judge.results import RunResult
from tests.support.sample import sample_run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def run() -> RunResult:
    return sample_run()


def _svg(search: c.Search) -> ET.Element:
    return ET.fromstring(c.chart(search, "#00838f"))


def _panel(svg: ET.Element, name: str) -> ET.Element:
    return next(g for g in svg.iter(f"{SVG}g") if g.get("data-panel") == name)


def _texts(svg: ET.Element) -> str:
    return " ".join("".join(t.itertext()) for t in svg.iter(f"{SVG}text"))


def _ran(run: RunResult) -> list[c.Search]:
    return [s for s in c.searches(run) if not s.skipped]


def test_every_search_of_the_run_is_found_and_a_skipped_one_says_why(run: RunResult) -> None:
    found = c.searches(run)
    assert len(found) == 10 and len(_ran(run)) == 9
    (skipped,) = [s for s in found if s.skipped]
    assert skipped.result.cell.id == "pd.cpu_attn.p32-d32.auto.v1.candidate"
    assert skipped.line() == "no capacity search: the throughput measurement was error"


def test_the_chart_says_its_cell_its_capacity_and_its_slo_inside_the_svg(run: RunResult) -> None:
    search = next(s for s in _ran(run) if s.result.cell.id == "agg.cpu_attn.b32.auto.v1.baseline")
    text = _texts(_svg(search))
    assert "agg.cpu_attn.b32.auto.v1.baseline" in text
    assert "SLO capacity 24.7 req/s [22.6, 26.9]" in text
    assert "SLO 1000 ms" in text and "SLO 50 ms" in text and "target 90%" in text
    assert "offered rate (req/s, log scale)" in text and "capacity 24.7" in text


@pytest.mark.parametrize(("panel", "key", "limit"), [("ttft", "ttft_p99_s", 1.0), ("itl", "itl_p99_s", 0.05)])
def test_every_probe_is_drawn_and_the_slo_line_lies_at_its_value(
    run: RunResult, panel: str, key: str, limit: float
) -> None:
    scaled = 0
    for search in _ran(run):
        curve: list[dict[str, Any]] = search.evidence["curve"]
        group = _panel(_svg(search), panel)
        marks = [g for g in group.iter(f"{SVG}g") if g.get("class") == "probe"]
        assert sorted(float(g.get("data-rate", "")) for g in marks) == pytest.approx(
            sorted(row["offered_rate"] for row in curve)
        ), search.result.cell.id
        (slo,) = [line for line in group.iter(f"{SVG}line") if line.get("class") == "slo"]
        slo_y = float(slo.get("y1", ""))
        # the panel's linear scale, from two probes drawn to scale: y = a + b * value
        on_scale = []
        for row, mark in zip(sorted(curve, key=lambda r: r["offered_rate"]), marks, strict=True):
            if mark.find(f"{SVG}path[@class='off-scale']") is None:
                on_scale.append((row[key] * 1e3, float(mark.get("data-y", ""))))
            else:
                assert row[key] * 1e3 > limit * 1e3 and float(mark.get("data-y", "")) < slo_y  # above, at the top
        if len(on_scale) < 2 or math.isclose(min(on_scale)[0], max(on_scale)[0]):
            continue  # every probe above the panel (no rate held the SLO): the scale is not drawn from probes
        (v1, y1), (v2, y2) = min(on_scale), max(on_scale)
        scaled += 1
        slope = (y2 - y1) / (v2 - v1)
        assert slope < 0  # larger latencies higher up
        assert slo_y == pytest.approx(y1 + slope * (limit * 1e3 - v1), abs=0.05), search.result.cell.id
        for value, y in on_scale:
            assert (y > slo_y) == (value < limit * 1e3)
    assert scaled >= 8


def test_the_attainment_panel_draws_every_probe_and_the_target(run: RunResult) -> None:
    search = next(s for s in _ran(run) if s.result.cell.id == "pd.cpu_attn.p32-d32.auto.v1.baseline")
    group = _panel(_svg(search), "attainment")
    marks = [g for g in group.iter(f"{SVG}g") if g.get("class") == "probe"]
    assert len(marks) == len(search.evidence["curve"])
    (target,) = [line for line in group.iter(f"{SVG}line") if line.get("class") == "slo"]
    for row, mark in zip(sorted(search.evidence["curve"], key=lambda r: r["offered_rate"]), marks, strict=True):
        above = float(mark.get("data-y", "")) < float(target.get("y1", ""))
        assert above == (row["attainment"] > 0.9), row
        filled = mark.find(f"{SVG}circle")
        if row["saturated"]:
            assert filled is None  # a cross
        else:
            assert filled is not None and (filled.get("fill") != "#ffffff") == row["passes"]


def test_the_estimate_and_its_interval_are_marked_and_a_missing_end_stays_open(run: RunResult) -> None:
    by_cell = {s.result.cell.id: s for s in _ran(run)}
    found = _svg(by_cell["pd.cpu_attn.p32-d32.auto.v1.baseline"])
    (estimate,) = [line for line in found.iter(f"{SVG}line") if line.get("class") == "estimate"]
    (band,) = [r for r in found.iter(f"{SVG}rect") if r.get("class") == "interval"]
    x = float(estimate.get("x1", ""))
    left, width = float(band.get("x", "")), float(band.get("width", ""))
    assert LEFT < left < x < left + width < WIDTH - RIGHT  # [5.29, 6.18] around 5.89, both ends inside
    nothing = _svg(by_cell["pd.cpu_attn.p128-d128.auto.v1.candidate"])
    assert not [line for line in nothing.iter(f"{SVG}line") if line.get("class") == "estimate"]
    (open_band,) = [r for r in nothing.iter(f"{SVG}rect") if r.get("class") == "interval"]
    assert float(open_band.get("x", "")) == LEFT  # no lower end: the band runs to the plot's edge
    assert "no rate held the SLO (interval [below, 0.25] req/s)" in _texts(nothing)


def test_html_has_the_section_with_the_gain_table_and_its_assumption(run: RunResult) -> None:
    page = html_report.render(run)
    start = page.index("<h2 id='capacity'>")
    section = page[start : page.index("<h2", start + 1)]
    assert len(re.findall(r"<svg", section)) == 9
    table = section[section.index("<table class='gain'>") :]
    assert table.count("<tr>") == 1 + 5  # header + the P/D cells with a gain block
    assert "linear-scaling assumption: no 2-engine aggregated deployment is measured" in section
    assert "0.119 [0.0983, 0.137] (control x2)" in table
    assert "none: the capacity search of this cell found no rate at which the SLO held" in table
    assert "the throughput measurement was error" in section


def test_markdown_has_a_line_per_cell_and_the_gain_table(run: RunResult) -> None:
    text = markdown.render(run)
    section = text[text.index("## SLO capacity") : text.index("## Changes")]
    lines = [line for line in section.splitlines() if line.startswith("- [`")]
    assert len(lines) == 10
    assert (
        "- [`pd.cpu_attn.p128-d128.auto.v1.baseline`](#cell-pd.cpu_attn.p128-d128.auto.v1.baseline): "
        "SLO capacity 5.49 req/s [4.96, 5.76]; 12 probes, 1196 requests, 286 s; stopped: bracket within 10%; "
        "interval within +-10%"
    ) in lines
    assert any("no rate held the SLO (interval [below, 0.25] req/s)" in line for line in lines)
    assert "Aggregated control scaled x2, linear-scaling assumption" in section
    assert (
        "| baseline | CPU_ATTN | p32-d32 | pd.cpu_attn.p32-d32.auto.v1.baseline | 5.89 req/s [5.29, 6.18] | "
        "agg.cpu_attn.b32.auto.v1.baseline | 24.7 req/s [22.6, 26.9] | 0.119 [0.0983, 0.137] (control x2) |"
    ) in section


def test_a_run_without_capacity_searches_has_no_section(run: RunResult) -> None:
    bare = run.model_copy(deep=True)
    for result in bare.cells:
        check = result.check("throughput")
        if check is not None:
            check.evidence.pop("capacity", None)
            check.evidence.pop("disaggregation_gain", None)
    assert "## SLO capacity" not in markdown.render(bare)
    assert "id='capacity'" not in html_report.render(bare)
