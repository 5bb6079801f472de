"""The report's performance depth and its colours: each cell's latency distribution (p1-p99) and
load-run time series from the per-request samples the throughput check records, read from the run
directory whatever directory the run recorded them from; one palette, each data colour one meaning
in every chart; each cell's details say what the config expects and then its checks, without
repeating the cell's reason (made of the same check summaries) above them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import reporthistory as h

from canary.core.svg import BASELINE, OTHER_IMAGE, PALETTE
from canary.export.report import html
from canary.export.report.requests import PERCENTILES, load_requests
from canary.judge.results import RunResult
from canary.judge.verdicts import VERDICT_COLOR
from canary.load.stats import percentile


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path, str]:
    root = tmp_path_factory.mktemp("results")
    run, trends = h.with_history(root)
    run = h.with_mixed_pair(run)
    run_dir = root / run.run_id
    h.write_requests(run, run_dir)
    html.write_html(run, run_dir, trends)
    return run, run_dir, (run_dir / "summary.html").read_text(encoding="utf-8")


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, re.S)


def _groups(svg: str) -> list[tuple[str, str]]:
    """(tooltip, the group's markup) per <g> of a chart."""
    return re.findall(r"<g><title>([^<]*)</title>(.*?)</g>", svg, re.S)


def test_the_samples_are_read_from_the_run_directory(recorded: tuple[RunResult, Path, str]) -> None:
    run, run_dir, _ = recorded
    found = load_requests(run, run_dir)  # the evidence says results/<run id>/cells/..., not under run_dir's parent
    measured = [c for c in run.cells if (t := c.check("throughput")) is not None and "ttft_p50_s" in t.metrics]
    assert set(found) == {c.cell.id for c in measured} and len(found) >= 10
    assert all(len(r.samples) == 60 - 4 for r in found.values())  # warm-up requests left out
    moved = run_dir.parent / "moved"
    run_dir.rename(moved)
    try:
        assert load_requests(run, moved).keys() == found.keys()
        assert load_requests(run, run_dir) == {}  # gone: no samples, no exception
    finally:
        moved.rename(run_dir)


def test_each_cell_has_its_latency_distribution_and_percentiles(recorded: tuple[RunResult, Path, str]) -> None:
    run, run_dir, page = recorded
    requests = load_requests(run, run_dir)
    charts = [svg for svg in _svgs(page) if "per request: p1 to p99" in svg]
    assert [re.search(r"<title>(\w+) per request", svg).group(1) for svg in charts] == ["TTFT", "TPOT", "E2E"]  # type: ignore[union-attr]
    ttft = charts[0]
    cell = h.BASELINE_B32
    tip = next(t for t, _ in _groups(ttft) if t.startswith(f"{cell} ttft"))
    values = requests[cell].values("ttft")
    for p in PERCENTILES:
        assert f"p{p} {percentile(values, p) * 1000:.1f} ms" in tip
    # the starved cell's distribution is drawn hatched, not scaled to
    assert any(t.startswith(f"{h.INVALID_TONIGHT} ttft") and "not-to-scale" in g for t, g in _groups(ttft))
    # its details: a percentile table p1..p99 per metric; a time series of its load run
    details = page.split(f"id='cell-{cell}'", 1)[1].split("<section", 1)[0]
    assert "<table class='pct'>" in details and all(f"<th>p{p}</th>" in details for p in PERCENTILES)
    assert all(f"<tr><th>{m}</th>" in details for m in ("TTFT", "TPOT", "ITL", "E2E"))
    series = [svg for svg in _svgs(page) if "TTFT of each request over the load run" in svg]
    assert len(series) == len(requests)
    dots = re.findall(r"<circle ", next(svg for svg in series if f"<title>{cell}:" in svg))
    assert len(dots) == len(requests[cell].samples)


def test_without_samples_there_is_no_distribution(recorded: tuple[RunResult, Path, str]) -> None:
    run, _, _ = recorded
    page = html.render(run)
    assert "per request: p1 to p99" not in page and "<table class='pct'>" not in page


def test_one_palette_each_colour_one_meaning_in_every_chart(recorded: tuple[RunResult, Path, str]) -> None:
    run, _, page = recorded
    colours = [p.color for p in PALETTE]
    assert len(set(colours)) == len(colours) and not set(colours) & set(VERDICT_COLOR.values())
    assert len({p.meaning for p in PALETTE}) == len(PALETTE)
    for paint in (BASELINE, OTHER_IMAGE):  # the legend says what each means
        assert f"background:{paint.color}'></span>{paint.meaning}</span>" in page
    image = {c.cell.id: c.cell.image for c in run.cells}
    charts = [
        svg
        for svg in _svgs(page)
        if re.search(
            r"<title>(TTFT|TPOT|ITL|E2E) |<title>Output tokens|<title>GSM8K|<title>[^<]*over the load run", svg
        )
    ]
    assert len(charts) >= 4 + 3 + 1 + 1 + 10
    checked = 0
    for svg in charts:
        for tip, group in _groups(svg):
            cell = next((c for c in sorted(image, key=len, reverse=True) if tip.startswith(c)), None)
            fills = set(re.findall(r"fill='(#[0-9a-f]{6})'", group)) & set(colours)
            if cell is None or not fills:
                continue
            want = BASELINE.color if image[cell] == run.baseline_image else OTHER_IMAGE.color
            assert fills == {want}, (tip, fills)
            checked += 1
        if "over the load run" in svg:
            cell = re.search(r"<title>([^:]+):", svg).group(1)  # type: ignore[union-attr]
            want = BASELINE.color if image[cell] == run.baseline_image else OTHER_IMAGE.color
            assert set(re.findall(r"fill='(#[0-9a-f]{6})'", svg)) & set(colours) == {want}
            checked += 1
    assert checked > 60
    assert "pink" not in page


def test_details_say_what_is_expected_and_do_not_repeat_the_reason(recorded: tuple[RunResult, Path, str]) -> None:
    run, _, page = recorded
    for result in run.cells:
        details = page.split(f"id='cell-{result.cell.id}'", 1)[1].split("<section", 1)[0]
        if result.checks:
            assert f"<p>{html.escape(result.reason)}</p>" not in details, result.cell.id
        if result.cell.expect is not None:
            assert html.escape(result.cell.expect.reason) in details
    mixed = page.split(f"id='cell-{h.MIXED}'", 1)[1].split("<section", 1)[0]
    assert f"expected check-fail (parity): {h.MIXED_REASON}" in mixed
