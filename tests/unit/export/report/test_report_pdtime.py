"""The report's "Where P/D time goes" section (canary/export/report/pdtime.py): a stacked bar per P/D cell
from the throughput check's evidence.pd_time, its own term colours, and why a cell has no split."""

from __future__ import annotations

import re
from html import escape

from canary.core.metric_keys import PD_TIME_TERMS
from canary.core.svg import PALETTE
from canary.export.report import html
from canary.export.report.grid import check_verdicts, not_to_scale
from canary.export.report.pdtime import TERM_COLORS, TERM_WORDS, pd_time_section
from canary.judge.results import CellResult, RunResult
from canary.judge.verdicts import OUTCOME_COLOR, VERDICT_COLOR
from tests.support.sample import sample_run


def _cell(run: RunResult, cell_id: str) -> CellResult:
    return next(c for c in run.cells if c.cell.id == cell_id)


def _pd_cells(run: RunResult) -> list[str]:
    return [
        c.cell.id
        for c in run.cells
        if (t := c.check("throughput")) is not None and isinstance(t.evidence.get("pd_time"), dict)
    ]


def test_each_pd_cell_gets_a_stacked_bar_of_its_ttft_terms() -> None:
    run = sample_run()
    cells = _pd_cells(run)
    assert cells
    page = html.render(run)
    section = page.split("<h2 id='pd-time'>Where P/D time goes</h2>", 1)[1].split("<h2>", 1)[0]
    (svg,) = re.findall(r"<svg.*?</svg>", section, re.S)
    marked = 0
    for cell in cells:
        stats = _cell(run, cell).check("throughput").evidence["pd_time"]["stats_ms"]  # type: ignore[union-attr]
        why = not_to_scale(check_verdicts(_cell(run, cell)), "throughput")
        label = f"{cell} (not comparable: {why})" if why else cell  # an invalid or corrupted cell's times say so
        marked += bool(why)
        for term in PD_TIME_TERMS[:-1]:  # the TTFT terms, left to right; decode only in the table
            assert f"<title>{escape(label)} {term}: {float(stats[term]['p50']):.3g} ms</title>" in svg
            assert f"fill='{TERM_COLORS[term]}'" in svg
        assert f"<td>{escape(label)}</td>" in section
    assert 0 < marked < len(cells)  # the sample has both
    assert f"fill='{TERM_COLORS['decode']}'" not in svg
    assert all(escape(TERM_WORDS[t]) in section for t in PD_TIME_TERMS[:-1])  # the legend


def test_term_colours_are_their_own() -> None:
    colours = list(TERM_COLORS.values())
    assert len(set(colours)) == len(colours) == len(PD_TIME_TERMS) and set(TERM_COLORS) == set(PD_TIME_TERMS)
    taken = {p.color for p in PALETTE} | set(VERDICT_COLOR.values()) | set(OUTCOME_COLOR.values())
    assert not set(colours) & taken


def test_a_cell_without_a_split_says_why_and_a_run_without_pd_has_no_section() -> None:
    run = sample_run()
    cell = _cell(run, _pd_cells(run)[0])
    check = cell.check("throughput")  # type: ignore[union-attr]
    check.evidence["pd_time"] = {"available": False, "why": "decode: Scheduler.schedule missing: no method"}  # type: ignore[union-attr]
    body = pd_time_section(run)
    assert f"{cell.cell.id}: decomposition unavailable: decode: Scheduler.schedule missing: no method" in body
    for result in run.cells:
        if (t := result.check("throughput")) is not None:
            t.evidence.pop("pd_time", None)
    assert pd_time_section(run) == "" and "id='pd-time'" not in html.render(run)
