"""summary.html: one self-contained file (inline CSS and SVG, no scripts, no external assets) with
the matrix heatmap, latency, throughput and GSM8K accuracy plots and the per-cell table, for people
who run `make canary` without a Grafana."""

from __future__ import annotations

from html import escape
from pathlib import Path

from canary.atomic import write_atomic
from canary.report.grid import (
    DETAIL_COLUMNS,
    accuracy_interval,
    fmt,
    kv_grain,
    log_excerpt,
    number,
    sections,
)
from canary.report.outcome import attempts_line, headline, status_word
from canary.report.svg import BAR_COLORS, Bar, Tile, hbar_chart, heatmap
from canary.results import LATENCIES, RunResult
from canary.verdicts import FAILING_VERDICTS, OUTCOME_COLOR, VERDICT_COLOR

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#212121;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #e0e0e0}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #e0e0e0;padding:3px 6px;text-align:left}
th{background:#f5f5f5}.v{color:#fff;padding:1px 6px;border-radius:3px;white-space:nowrap}
.grid{display:flex;flex-wrap:wrap;gap:16px}pre{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:12px}
.legend span{margin-right:10px}
.outcome{font-weight:bold;padding:6px 10px;border-left:6px solid}
"""


def _badge(verdict: str) -> str:
    return f"<span class='v' style='background:{VERDICT_COLOR[verdict]}'>{escape(verdict)}</span>"


def _heatmaps(run: RunResult) -> str:
    parts = []
    for section in sections(run):
        tiles: dict[tuple[str, str], list[Tile]] = {}
        for key, entries in section.entries.items():
            tiles[key] = [
                Tile(
                    color=VERDICT_COLOR[e.verdict],
                    text=(e.variant or e.verdict)[:20],
                    tooltip=f"{e.result.cell.id}: {e.verdict}. {e.result.reason}",
                )
                for e in entries
            ]
        parts.append(heatmap(section.title, section.rows, section.columns, tiles))
    legend = "".join(f"<span>{_badge(v)}</span>" for v in VERDICT_COLOR)
    return f"<p class='legend'>{legend}</p><div class='grid'>{''.join(parts)}</div>"


def _latency_charts(run: RunResult) -> str:
    charts = []
    for index, (kind, words) in enumerate(LATENCIES.items()):
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
                    color=BAR_COLORS[index % len(BAR_COLORS)],
                )
            )
        charts.append(hbar_chart(f"{kind.upper()} p50 (bar) to p99 (whisker): {words}", bars, "ms"))
    return "<div class='grid'>" + "".join(charts) + "</div>"


def _throughput_chart(run: RunResult) -> str:
    bars = []
    for result in run.cells:
        value = number(result, "throughput", "output_tokens_per_s")
        if value is None:
            continue
        rps = number(result, "throughput", "requests_per_s")
        color = BAR_COLORS[0] if result.cell.image == (run.baseline_image or result.cell.image) else BAR_COLORS[1]
        bars.append(
            Bar(result.cell.id, value, tooltip=f"{result.cell.id}: {value:.1f} tok/s, {fmt(rps)} req/s", color=color)
        )
    return hbar_chart("Output tokens per second (orange: not the baseline image)", bars, "tok/s")


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
                color=VERDICT_COLOR["fail"] if failed else BAR_COLORS[0],
            )
        )
    reference = (next(iter(gates)), f"gate {next(iter(gates)):.2f}") if len(gates) == 1 else None
    return hbar_chart(
        "GSM8K accuracy with its Wilson interval", bars, "accuracy", maximum=1.0, points=True, reference=reference
    )


def _table(run: RunResult) -> str:
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in ("cell", "verdict", *(c.header for c in DETAIL_COLUMNS), "GSM8K [Wilson]", "KV grain", "reason")
    )
    rows = []
    for result in run.cells:
        values = "".join(f"<td>{escape(fmt(number(result, c.check, c.key), c.unit))}</td>" for c in DETAIL_COLUMNS)
        logs = " ".join(f"<a href='{escape(path)}'>{escape(role)}</a>" for role, path in sorted(result.logs.items()))
        rows.append(
            f"<tr><td><code>{escape(result.cell.id)}</code> {logs}</td><td>{_badge(result.verdict)}</td>{values}"
            f"<td>{escape(accuracy_interval(result))}</td><td>{escape(kv_grain(result))}</td>"
            f"<td>{escape(result.reason)}</td></tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _failures(run: RunResult) -> str:
    parts = []
    for result in run.cells:
        if result.verdict not in FAILING_VERDICTS and result.verdict != "expected-fail":
            continue
        items = []
        for check in result.checks:
            if check.verdict == "pass":
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
        parts.append(
            f"<h3><code>{escape(result.cell.id)}</code> {_badge(result.verdict)}</h3><p>{escape(result.reason)}</p>"
            f"<ul>{''.join(items)}</ul>"
        )
    return "".join(parts) or "<p>none</p>"


def render(run: RunResult) -> str:
    """The HTML report of a run."""
    counts = " ".join(f"{_badge(v)} {n}" for v, n in sorted(run.counts().items()))
    finished = run.finished_at.isoformat(timespec="seconds") if run.finished_at else "not finished"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>vllm-canary {escape(run.run_id)}</title>
<style>{CSS}</style></head><body>
<h1>vllm-canary run <code>{escape(run.run_id)}</code>: {status_word(run)}</h1>
<p class="outcome {run.outcome}" style="border-color:{OUTCOME_COLOR[run.outcome]}">{escape(headline(run))}</p>
<p>config <code>{escape(run.config_name)}</code>, platform <code>{escape(run.platform)}</code>, target
<code>{escape(run.target)}</code>; started {escape(run.started_at.isoformat(timespec="seconds"))}, finished
{escape(finished)} ({run.duration_s:.0f} s){" <b>interrupted</b>" if run.interrupted else ""}; cells: {counts}</p>
<h2>Matrix</h2>{_heatmaps(run)}
<h2>Latency under load</h2>{_latency_charts(run)}
<h2>Throughput</h2>{_throughput_chart(run)}
<h2>GSM8K accuracy</h2>{_accuracy_chart(run)}
<h2>Cells</h2>{_table(run)}
<h2>Failures and expected failures</h2>{_failures(run)}
</body></html>
"""


def write_html(run: RunResult, run_dir: Path) -> Path:
    """Write summary.html."""
    return write_atomic(run_dir / "summary.html", render(run))
