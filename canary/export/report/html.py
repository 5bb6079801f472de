"""summary.html: one self-contained file (inline CSS and SVG, no scripts, no external assets) for
people who run `make canary` without a Grafana: a banner that says why the run failed, the matrix
heatmaps (each tile links to its cell's details), the per-cell numbers, what changed against the
previous and the last good run with sparklines of the key metrics (canary.export.report.trends), the
latency, throughput and GSM8K plots (invalid or corrupted cells hatched, never scaled to), and
every cell's details; with the run's bisect.json (canary bisect, or the automatic bisection after
the run) a section per bisected cell: its outcome, culprit and steps, linked from the cell's row.
With capacity searches (checks.throughput.capacity) each cell's latency-vs-rate chart and the P/D
cells' disaggregation gains (canary.export.report.capacity).
With the per-request samples of the load runs (canary.export.report.requests)
it draws each cell's latency distribution (p1-p99) and the time series of its load run. Colours mean
one thing each (canary.core.svg.PALETTE for data, canary.judge.verdicts for verdicts; a legend says
which). Readable from 900 px wide: each cell's why sits left of the numbers (visible without
scrolling, a few lines long), wide tables scroll inside their own box, the charts scale down and
their labels are cut to stay inside them; tests/report/test_report_browser.py checks it in chromium."""

from __future__ import annotations

from html import escape
from pathlib import Path

from canary.core.atomic import write_atomic
from canary.core.svg import (
    BASELINE,
    NOT_TO_SCALE_FILL,
    NOT_TO_SCALE_STROKE,
    OTHER_IMAGE,
    REFERENCE_COLOR,
    Bar,
    Box,
    Tile,
    box_chart,
    hbar_chart,
    heatmap,
    scatter,
    sparkline,
)
from canary.export.report.capacity import html_section as capacity_section
from canary.export.report.grid import (
    DETAIL_COLUMNS,
    accuracy_interval,
    anchor,
    cell_value,
    check_verdicts,
    fmt,
    kv_grain,
    log_excerpt,
    not_to_scale,
    number,
    sections,
)
from canary.export.report.outcome import attempts_line, headline, not_passing, status_word, why
from canary.export.report.pdtime import pd_time_section
from canary.export.report.requests import METRICS, PERCENTILES, Requests, load_requests
from canary.export.report.trends import (
    KEY_METRICS,
    NO_PREVIOUS,
    CellTrend,
    Seen,
    Trends,
    changes,
    same_run,
    verdict_changed,
)
from canary.export.report.workload import html_section as workload_section
from canary.judge.bisection import OUTCOME_WORDS, BisectFile, BisectReport, culprit_text, read_file
from canary.judge.results import LATENCIES, CellResult, RunResult
from canary.judge.verdicts import BY_NAME, OUTCOME_COLOR, VERDICT_COLOR

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#212121;max-width:1400px}
h1{font-size:22px;overflow-wrap:anywhere}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #e0e0e0}
h3{font-size:15px;overflow-wrap:anywhere}p,li{overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #e0e0e0;padding:3px 6px;text-align:left;
vertical-align:top}th{background:#f5f5f5}td.reason{min-width:22em;max-width:30em}td:first-child{min-width:17em}
td.num{white-space:nowrap}
.v{color:#fff;padding:1px 6px;border-radius:3px;white-space:nowrap}
.grid{display:flex;flex-wrap:wrap;gap:16px}.grid>svg,svg{max-width:100%;height:auto}
pre{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:12px;max-width:100%}
.legend span{margin-right:10px;display:inline-block}
.banner{padding:8px 12px;border-left:8px solid;background:#fafafa;margin:12px 0}
.banner .outcome{font-weight:bold;font-size:16px;margin:0 0 6px 0}.banner ul{margin:4px 0;padding-left:20px}
.note{color:#546e7a;font-size:13px}.changed{font-weight:bold}
.spark{display:inline-block;margin:0 10px 4px 0;font-size:11px;color:#546e7a;vertical-align:top}
.spark svg{display:block}
.cell{border-top:1px solid #e0e0e0;padding-top:4px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border:1px solid #90a4ae}
table.pct td{text-align:right}
table.steps td:first-child{min-width:0}
"""


def _badge(verdict: str) -> str:
    return f"<span class='v' style='background:{VERDICT_COLOR[verdict]}'>{escape(verdict)}</span>"


def _cell_id(cell_id: str) -> str:
    """A cell id that may break after its dots (and nowhere else) in a narrow column."""
    return "<code>" + ".<wbr>".join(escape(part) for part in cell_id.split(".")) + "</code>"


def _link(result: CellResult) -> str:
    return f"<a href='#{escape(anchor(result.cell.id))}'>{_cell_id(result.cell.id)}</a>"


def _why(result: CellResult) -> str:
    """Why a cell has its verdict, in a few words: outcome.why; a pass says so (not its summaries),
    an expected failure what the config says it expects (a sentence written to be read whole)."""
    if result.verdict == "pass":
        return BY_NAME["pass"].meaning
    if result.verdict == "expected-fail" and result.cell.expect is not None:
        return result.cell.expect.reason
    return why(result)


def _banner(run: RunResult, trends: Trends, bisections: BisectFile | None = None) -> str:
    """The outcome in one line, then every cell that kept the run from passing with why (linked, and
    its bisection when it was bisected), then every cell that failed as expected with why (what the
    config expects is a finding too)."""
    items = "".join(
        f"<li>{_link(result)} {_badge(result.verdict)} {escape(_why(result))}"
        f"{_bisect_link(bisections, result, ' ')}</li>"
        for result in not_passing(run)
    )
    listed = f"<ul>{items}</ul>" if items else ""
    expected = [r for r in run.cells if r.verdict == "expected-fail"]
    if expected:
        known = "".join(f"<li>{_link(r)} {_badge(r.verdict)} {escape(_why(r))}</li>" for r in expected)
        listed += (
            f"<p class='note'>Failed as the config expects ({len(expected)}):</p><ul class='expected'>{known}</ul>"
        )
    if trends.note:
        history = trends.note
    elif trends.runs_read:
        history = f"compared with {trends.runs_read} earlier run(s) of {run.config_name} from the run history"
    else:
        history = f"{NO_PREVIOUS}: this is the first run of {run.config_name} in the history"
    return (
        f"<div class='banner' style='border-color:{OUTCOME_COLOR[run.outcome]}'>"
        f"<p class='outcome {run.outcome}'>{escape(headline(run))}</p>{listed}"
        f"<p class='note'>{escape(history)}</p></div>"
    )


def _heatmaps(run: RunResult) -> str:
    parts = []
    for section in sections(run):
        tiles: dict[tuple[str, str], list[Tile]] = {}
        for key, entries in section.entries.items():
            tiles[key] = [
                Tile(
                    color=VERDICT_COLOR[e.verdict],
                    text=e.verdict,
                    sub=e.variant,
                    tooltip=f"{e.result.cell.id}: {e.verdict}. {e.result.reason}",
                    href=f"#{anchor(e.result.cell.id)}",
                )
                for e in entries
            ]
        parts.append(heatmap(section.title, section.rows, section.columns, tiles))
    legend = "".join(f"<span>{_badge(v)}</span>" for v in VERDICT_COLOR)
    return (
        f"<p class='legend'>{legend}</p><p class='note'>A tile links to its cell's details.</p>"
        f"<div class='grid'>{''.join(parts)}</div>"
    )


def _image_color(run: RunResult, result: CellResult) -> str:
    """A cell's data colour: the baseline image's, or another image's (PALETTE)."""
    return BASELINE.color if result.cell.image == (run.baseline_image or result.cell.image) else OTHER_IMAGE.color


def _swatch(color: str, meaning: str, style: str = "") -> str:
    return f"<span><span class='swatch' style='background:{color}{style}'></span>{escape(meaning)}</span>"


def _data_legend() -> str:
    """What the data colours of the charts mean (the same in every chart)."""
    hatch = f";background:repeating-linear-gradient(45deg,{NOT_TO_SCALE_FILL} 0 3px,{NOT_TO_SCALE_STROKE} 3px 5px)"
    parts = [
        _swatch(BASELINE.color, BASELINE.meaning),
        _swatch(OTHER_IMAGE.color, OTHER_IMAGE.meaning),
        _swatch(VERDICT_COLOR["fail"], "a check that failed (the fail verdict)"),
        _swatch(
            NOT_TO_SCALE_FILL, "hatched: not comparable (invalid, or a corrupted cell's speed), not to scale", hatch
        ),
        _swatch("#ffffff", "dashed line: a gate", f";border:1px dashed {REFERENCE_COLOR}"),
    ]
    return f"<p class='legend note'>{''.join(parts)}</p>"


def _latency_charts(run: RunResult) -> str:
    charts = []
    for kind, words in LATENCIES.items():
        bars = []
        for result in run.cells:
            p50 = number(result, "throughput", f"{kind}_p50_s")
            if p50 is None:
                continue
            p90 = number(result, "throughput", f"{kind}_p90_s")
            p99 = number(result, "throughput", f"{kind}_p99_s")
            bars.append(
                Bar(
                    label=result.cell.id,
                    value=p50 * 1000,
                    low=p50 * 1000 if p99 is not None else None,
                    high=p99 * 1000 if p99 is not None else None,
                    tooltip=f"{result.cell.id} {kind}: p50 {fmt(p50, 's')}, p90 {fmt(p90, 's')}, p99 {fmt(p99, 's')}",
                    color=_image_color(run, result),
                    not_to_scale=not_to_scale(check_verdicts(result), "throughput"),
                )
            )
        charts.append(hbar_chart(f"{kind.upper()} p50 (bar) to p99 (whisker): {words}", bars, "ms"))
    return "<div class='grid'>" + "".join(charts) + "</div>"


DISTRIBUTED = ("ttft", "tpot", "e2e")
"""The per-request metrics drawn as distributions (ITL pools token gaps: in the percentile tables)."""


def _distributions(run: RunResult, requests: dict[str, Requests]) -> str:
    """Per metric, one box plot per cell from its requests (p1-p99 whisker, p25-p75 box, median)."""
    if not requests:
        return ""
    charts = []
    for kind in DISTRIBUTED:
        boxes = []
        for result in run.cells:
            found = requests.get(result.cell.id)
            pct = found.percentiles(kind) if found else {}
            if not pct:
                continue
            ms = {p: v * 1000 for p, v in pct.items()}
            tip = ", ".join(f"p{p} {fmt(v, 's')}" for p, v in pct.items())
            boxes.append(
                Box(
                    result.cell.id,
                    ms[1],
                    ms[25],
                    ms[50],
                    ms[75],
                    ms[99],
                    tooltip=f"{result.cell.id} {kind} of {len(found.values(kind)) if found else 0} requests: {tip}",
                    color=_image_color(run, result),
                    not_to_scale=not_to_scale(check_verdicts(result), "throughput"),
                )
            )
        title = f"{METRICS[kind]} per request: p1 to p99 (whisker), p25 to p75 (box), median (line)"
        charts.append(box_chart(title, boxes, "ms"))
    series = []
    for result in run.cells:
        found = requests.get(result.cell.id)
        points = [(t, v * 1000) for t, v in found.timeline("ttft")] if found else []
        if points:
            title = f"{result.cell.id}: TTFT of each request over the load run"
            color = _image_color(run, result)
            series.append(scatter(title, points, "s since the first request", "ms", color=color, label=result.cell.id))
    return (
        "<h3>Latency distributions, from every request of the load runs</h3>"
        f"<div class='grid'>{''.join(charts)}</div>"
        "<h3>Load runs over time: each request's TTFT when it was sent</h3>"
        f"<div class='grid'>{''.join(series)}</div>"
    )


def _percentiles(found: Requests | None) -> str:
    """A cell's table of per-request percentiles (aiperf's p1-p99) per metric."""
    if found is None:
        return ""
    head = "".join(f"<th>p{p}</th>" for p in PERCENTILES)
    rows = []
    for kind, name in METRICS.items():
        pct = found.percentiles(kind)
        if pct:
            cells = "".join(f"<td>{escape(fmt(pct[p], 's'))}</td>" for p in PERCENTILES)
            rows.append(f"<tr><th>{name}</th>{cells}</tr>")
    if not rows:
        return ""
    return (
        f"<p>{len(found.samples)} measured requests:</p>"
        f"<div class='scroll'><table class='pct'><tr><th></th>{head}</tr>{''.join(rows)}</table></div>"
    )


def _throughput_chart(run: RunResult) -> str:
    bars = []
    for result in run.cells:
        value = number(result, "throughput", "output_tokens_per_s")
        if value is None:
            continue
        rps = number(result, "throughput", "requests_per_s")
        color = _image_color(run, result)
        bars.append(
            Bar(
                result.cell.id,
                value,
                tooltip=f"{result.cell.id}: {value:.1f} tok/s, {fmt(rps)} req/s",
                color=color,
                not_to_scale=not_to_scale(check_verdicts(result), "throughput"),
            )
        )
    return hbar_chart("Output tokens per second", bars, "tok/s")


def _pd_time(run: RunResult) -> str:
    body = pd_time_section(run)
    return f"<h2 id='pd-time'>Where P/D time goes</h2>{body}" if body else ""


def _accuracy_chart(run: RunResult) -> str:
    bars = []
    gates = set()
    for result in run.cells:
        acc = number(result, "accuracy", "accuracy")
        if acc is None:
            continue
        gate = number(result, "accuracy", "accuracy_threshold")
        check = result.check("accuracy")
        failed = check is not None and check.verdict == "fail"
        if gate is not None:
            gates.add(round(gate, 4))
        bars.append(
            Bar(
                result.cell.id,
                acc,
                low=number(result, "accuracy", "accuracy_wilson_low"),
                high=number(result, "accuracy", "accuracy_wilson_high"),
                tooltip=f"{result.cell.id}: {accuracy_interval(result)}"
                + (f", gate {gate:.2f}" if gate is not None else ""),
                color=VERDICT_COLOR["fail"] if failed else _image_color(run, result),
                not_to_scale=not_to_scale(check_verdicts(result), "accuracy"),
            )
        )
    reference = (next(iter(gates)), f"gate {next(iter(gates)):.2f}") if len(gates) == 1 else None
    return hbar_chart(
        "GSM8K accuracy with its Wilson interval",
        bars,
        "accuracy",
        maximum=1.0,
        points=True,
        reference=reference,
    )


def bisect_anchor(cell_id: str) -> str:
    """The id of a cell's bisection in summary.html: 'bisect-' + the cell's anchor."""
    return "bisect-" + anchor(cell_id)


def _bisect_link(bisections: BisectFile | None, result: CellResult, before: str = "<br>") -> str:
    """A link from a bisected cell to its bisection, after `before` (nothing for a cell not bisected)."""
    found = bisections.of(result.cell.id) if bisections is not None else None
    if found is None:
        return ""
    culprit = f": {found.culprit.name}" if found.culprit is not None else ""
    return (
        f"{before}<a class='bisect-link' href='#{escape(bisect_anchor(result.cell.id))}'>"
        f"bisect: {escape(OUTCOME_WORDS[found.outcome])}{escape(culprit)}</a>"
    )


def _table(run: RunResult, bisections: BisectFile | None = None) -> str:
    """Per cell its verdict and why (left, so visible at any width) and then its numbers; a bisected
    cell links to its bisection."""
    head = "".join(f"<th>{escape(h)}</th>" for h in ("cell", "why", *(c.header for c in DETAIL_COLUMNS), "KV grain"))
    rows = []
    for result in run.cells:
        values = "".join(f"<td class='num'>{escape(cell_value(result, c))}</td>" for c in DETAIL_COLUMNS)
        rows.append(
            f"<tr><td>{_link(result)}<br>{_badge(result.verdict)}{_bisect_link(bisections, result)}</td>"
            f"<td class='reason' title='{escape(result.reason)}'>{escape(_why(result))}</td>{values}"
            f"<td>{escape(kv_grain(result))}</td></tr>"
        )
    return f"<div class='scroll'><table class='cells'><tr>{head}</tr>{''.join(rows)}</table></div>"


_OBSERVED = {"good": "pass", "bad": "fail", "unknown": "invalid"}
"""A step's observation as a verdict colour when its evidence has no verdict (a scripted step)."""


def _bisection(b: BisectReport) -> str:
    """One bisected cell: outcome and culprit, why, the range, then every step with its verdict and time."""
    culprit = culprit_text(b)
    named = f"culprit: <b>{escape(culprit)}</b>" if culprit else "no culprit named"
    source = f"series <code>{escape(b.series)}</code>" if b.range_kind == "series" else "image range"
    if b.culprit is not None and b.culprit.path:
        source = f"patch file <code>{escape(b.culprit.path)}</code> of the {source}"
    rows = []
    for step in b.steps:
        verdict = str(step.evidence.get("verdict", _OBSERVED[step.observation]))
        badge = _badge(verdict) if verdict in VERDICT_COLOR else escape(verdict)
        rows.append(
            f"<tr><td>{step.number}</td><td>{escape(step.phase)}</td><td>{escape(step.label)}</td>"
            f"<td>{badge}</td><td class='num'>{step.duration_s / 60:.1f} min</td>"
            f"<td class='reason'>{escape(step.detail[:300])}</td></tr>"
        )
    head = "<tr><th>#</th><th>phase</th><th>ran</th><th>verdict</th><th>time</th><th>detail</th></tr>"
    steps = f"<div class='scroll'><table class='steps'>{head}{''.join(rows)}</table></div>" if rows else ""
    return (
        f"<section class='bisection' id='{escape(bisect_anchor(b.cell))}'>"
        f"<h3><a href='#{escape(anchor(b.cell))}'>{_cell_id(b.cell)}</a> "
        f"<span class='outcome'>{escape(OUTCOME_WORDS[b.outcome])}</span></h3>"
        f"<p>{named}; {b.cell_runs} cell runs in {b.duration_s / 60:.1f} min</p>"
        f"<p class='note'>{escape(b.reason)}</p>"
        f"<p class='note'>{source} of image <code>{escape(b.image)}</code>, {len(b.range)} entries; each step "
        f"reran {escape(', '.join(b.rerun_checks) or 'startup only')}</p>{steps}</section>"
    )


def _bisections(bisections: BisectFile | None) -> str:
    """The bisect section (nothing when the run has no bisect.json, or it names no cell)."""
    if bisections is None or not bisections.bisections:
        return ""
    return (
        "<h2 id='bisect'>Bisection</h2><p class='note'>The first patch of the image's series (or image of a "
        "range) that turns each red cell red, found by rerunning the cell's failed checks (bisect.json, "
        "bisect.md).</p>" + "".join(_bisection(b) for b in bisections.bisections)
    )


def _against(seen: Seen | None, result: CellResult) -> str:
    """The change against an earlier run, one line per item, the verdict bold when it changed."""
    lines = changes(seen, result)
    if seen is None:
        return f"<span class='note'>{escape(lines[0])}</span>"
    first = f"<span class='changed'>{escape(lines[0])}</span>" if verdict_changed(seen, result) else escape(lines[0])
    rest = "".join(f"<br>{escape(line)}" for line in lines[1:])
    return f"<span class='note'>{escape(seen.run_id)}</span><br>{first}{rest}"


def _last_good(trend: CellTrend, result: CellResult) -> str:
    if same_run(trend):
        return "<span class='note'>the previous run</span>"
    if trend.previous is not None and trend.last_good is None:
        return "<span class='note'>none in the runs read</span>"
    return _against(trend.last_good, result)


def _sparks(result: CellResult, trend: CellTrend) -> str:
    parts = []
    for column in KEY_METRICS:
        points = trend.recent.get(column)
        if not points:
            continue
        title = f"{result.cell.id}: {column.header} over the last {len(points)} runs"
        parts.append(f"<span class='spark'>{escape(column.header)}{sparkline(title, points)}</span>")
    if parts:
        return "".join(parts)
    return f"<span class='note'>{NO_PREVIOUS if trend.previous is None else 'no numbers'}</span>"


def _changes(run: RunResult, trends: Trends) -> str:
    """One row per cell the history knows; the cells it does not know are named once, in one line."""
    known = [r for r in run.cells if trends.of(r.cell.id).previous is not None or trends.of(r.cell.id).recent]
    new = [r for r in run.cells if r not in known]
    if not known:
        first = f"this is the first run of {run.config_name} in the history" if not trends.note else trends.note
        return f"<p class='note'>{NO_PREVIOUS} for any of the {len(run.cells)} cells: {escape(first)}.</p>"
    rows = []
    for result in known:
        trend = trends.of(result.cell.id)
        rows.append(
            f"<tr><td>{_link(result)}<br>{_badge(result.verdict)}</td>"
            f"<td>{_against(trend.previous, result)}</td><td>{_last_good(trend, result)}</td>"
            f"<td>{_sparks(result, trend)}</td></tr>"
        )
    head = "<tr><th>cell</th><th>vs previous run</th><th>vs last good run</th><th>recent runs</th></tr>"
    unknown = (
        f"<p class='note'>{NO_PREVIOUS} ({len(new)} new cells): {', '.join(_link(r) for r in new)}</p>" if new else ""
    )
    return (
        "<p class='note'>Last good run: the newest earlier run where the cell passed or failed as expected. "
        "Sparklines: oldest left, this run the big dot; grey ticks: not comparable (invalid, or a "
        "corrupted cell's speed).</p>"
        f"<div class='scroll'><table>{head}{''.join(rows)}</table></div>{unknown}"
    )


def _check_items(result: CellResult) -> str:
    items = []
    for check in result.checks:
        if check.verdict == "pass":
            items.append(f"<li><b>{escape(check.name)}</b> {_badge(check.verdict)} {escape(check.summary)}</li>")
            continue
        gates = "".join(
            f"<li>gate <code>{escape(g.name)}</code> {'passed' if g.passed else 'FAILED'}: "
            f"observed {escape(fmt(g.observed))}, threshold {escape(fmt(g.threshold))}. {escape(g.detail)}</li>"
            for g in check.gates
        )
        excerpt = log_excerpt(check)
        pre = f"<pre>{escape(excerpt[-6000:])}</pre>" if excerpt else ""
        fclass = check.evidence.get("failure_class")
        fc = f" (failure class <code>{escape(str(fclass))}</code>)" if fclass else ""
        tries = attempts_line(check)
        fc += f"<br>{escape(tries)}" if tries else ""
        items.append(
            f"<li><b>{escape(check.name)}</b> {_badge(check.verdict)} {escape(check.summary)}{fc}"
            f"<ul>{gates}</ul>{pre}</li>"
        )
    return "".join(items)


def _expected(result: CellResult) -> str:
    """What the config expects of a cell, when it expects something."""
    expect = result.cell.expect
    if expect is None:
        return ""
    checks = f" ({', '.join(expect.failing_checks)})" if expect.failing_checks else ""
    return f"<p class='note'>expected {escape(expect.expect)}{escape(checks)}: {escape(expect.reason)}</p>"


def _details(run: RunResult, trends: Trends, requests: dict[str, Requests]) -> str:
    """One section per cell (the grid's and the tables' links land here): what the config expects,
    the history, then each check (the cell's reason is made of their summaries: not repeated)."""
    parts = []
    for result in run.cells:
        trend = trends.of(result.cell.id)
        logs = " ".join(f"<a href='{escape(path)}'>{escape(role)}</a>" for role, path in sorted(result.logs.items()))
        checks = _check_items(result)
        history = ""
        if trend.previous is not None or trend.recent:
            history = (
                f"<p>vs previous run: {_against(trend.previous, result).replace('<br>', '; ')}<br>"
                f"vs last good run: {_last_good(trend, result).replace('<br>', '; ')}</p>"
            )
        parts.append(
            f"<section class='cell' id='{escape(anchor(result.cell.id))}'>"
            f"<h3>{_cell_id(result.cell.id)} {_badge(result.verdict)}</h3>"
            + _expected(result)
            + ("" if result.checks else f"<p>{escape(result.reason)}</p>")
            + history
            + (f"<p>{_sparks(result, trend)}</p>" if trend.recent else "")
            + (f"<ul>{checks}</ul>" if checks else "")
            + _percentiles(requests.get(result.cell.id))
            + (f"<p>logs: {logs}</p>" if logs else "")
            + "</section>"
        )
    return "".join(parts)


def render(
    run: RunResult,
    trends: Trends | None = None,
    requests: dict[str, Requests] | None = None,
    bisections: BisectFile | None = None,
) -> str:
    """The HTML report of a run, compared with its history when trends are given, with its latency
    distributions when the per-request samples of its load runs are given, and its bisect section
    when its bisections are."""
    trends = trends or Trends()
    requests = requests or {}
    counts = " ".join(f"{_badge(v)} {n}" for v, n in sorted(run.counts().items()))
    finished = run.finished_at.isoformat(timespec="seconds") if run.finished_at else "not finished"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>vllm-canary {escape(run.run_id)}</title>
<style>{CSS}</style></head><body>
<h1>vllm-canary run <code>{escape(run.run_id)}</code>: {status_word(run)}</h1>
{_banner(run, trends, bisections)}
<p>config <code>{escape(run.config_name)}</code>, platform <code>{escape(run.platform)}</code>, target
<code>{escape(run.target)}</code>; started {escape(run.started_at.isoformat(timespec="seconds"))}, finished
{escape(finished)} ({run.duration_s:.0f} s){" <b>interrupted</b>" if run.interrupted else ""}; cells: {counts}</p>
<h2>Matrix</h2>{_heatmaps(run)}
<h2>Cells</h2>{_table(run, bisections)}
{_bisections(bisections)}
<h2>Changes</h2>{_changes(run, trends)}
<h2>Latency under load</h2>{_data_legend()}{_latency_charts(run)}{_distributions(run, requests)}
<h2>Throughput</h2>{_throughput_chart(run)}{workload_section(run)}
{capacity_section(run, {r.cell.id: _image_color(run, r) for r in run.cells})}
{_pd_time(run)}
<h2>GSM8K accuracy</h2>{_accuracy_chart(run)}
<h2>Cell details</h2>{_details(run, trends, requests)}
</body></html>
"""


def write_html(run: RunResult, run_dir: Path, trends: Trends | None = None) -> Path:
    """Write summary.html (with the per-request samples recorded under run_dir, and its bisect.json
    whenever there is one: `canary bisect` renders it again after a bisection)."""
    html = render(run, trends, load_requests(run, run_dir), read_file(run_dir))
    return write_atomic(run_dir / "summary.html", html)
