"""The report's "Where P/D time goes" section: each P/D cell's TTFT split into its terms (the throughput
check's evidence.pd_time, canary/checks/throughput/pdtime.py) as one stacked bar per cell, the medians
and p90 of every term in a table, and why a cell has no split when it has none."""

from __future__ import annotations

from html import escape
from typing import Any

from canary.core.metric_keys import PD_TIME_TERMS
from canary.core.svg import Segment, StackedBar, stacked_hbar_chart
from canary.export.report.grid import NOT_COMPARABLE, check_verdicts, not_to_scale
from canary.judge.results import CellResult, RunResult

TERM_COLORS: dict[str, str] = {
    "router": "#8d6e63",
    "prefill_queue": "#ffcc80",
    "prefill_compute": "#fb8c00",
    "decode_wait": "#90caf9",
    "kv_transfer": "#00bcd4",
    "handover": "#5c6bc0",
    "first_decode_step": "#43a047",
    "decode": "#bdbdbd",
}
"""One colour per term, in this section only (apart from the report's data palette and the verdict colours)."""
TERM_WORDS: dict[str, str] = {
    "router": "router and HTTP (what no engine accounts for)",
    "prefill_queue": "prefill queue",
    "prefill_compute": "prefill compute",
    "decode_wait": "decode waits to read the KV (scheduling, NIXL handshake)",
    "kv_transfer": "KV transfer (decode's NIXL read)",
    "handover": "handover (KV complete -> decode scheduled)",
    "first_decode_step": "first decode step",
    "decode": "rest of decode (after the first token)",
}


def _pd_time(result: CellResult) -> dict[str, Any] | None:
    check = result.check("throughput")
    found = check.evidence.get("pd_time") if check is not None else None
    return found if isinstance(found, dict) else None


def _label(result: CellResult) -> str:
    """The cell's name in the section: its id, and why its times are not comparable where they are not
    (its throughput measurement was invalid, or a corrupting check failed: canary.export.report.grid)."""
    why = not_to_scale(check_verdicts(result), "throughput")
    return f"{result.cell.id} ({NOT_COMPARABLE}: {why})" if why else result.cell.id


def _legend(terms: list[str]) -> str:
    return (
        "<p class='legend'>"
        + "".join(
            f"<span><span class='swatch' style='background:{TERM_COLORS[t]}'></span>{escape(TERM_WORDS[t])}</span>"
            for t in terms
        )
        + "</p>"
    )


def _table(rows: list[tuple[CellResult, dict[str, Any]]]) -> str:
    head = "".join(f"<th>{escape(t)} p50 / p90</th>" for t in PD_TIME_TERMS)
    body = []
    for result, found in rows:
        stats = found.get("stats_ms") or {}
        cells = "".join(
            f"<td class='num'>{stats[t]['p50']:.1f} / {stats[t]['p90']:.1f}</td>" if t in stats else "<td>-</td>"
            for t in PD_TIME_TERMS
        )
        joined = f"{found.get('joined', 0)} of {found.get('requests', 0)}"
        body.append(
            f"<tr><td>{escape(_label(result))}</td><td class='num'>{joined}</td>"
            f"<td class='num'>{found.get('recomputed', 0)}</td>{cells}</tr>"
        )
    return (
        "<div class='scroll'><table><tr><th>cell</th><th>requests joined</th><th>recomputed</th>"
        f"{head}</tr>{''.join(body)}</table></div>"
    )


def pd_time_section(run: RunResult) -> str:
    """The section's body (empty when no cell of the run is a P/D cell with a throughput result)."""
    found = [(r, pd) for r in run.cells if (pd := _pd_time(r)) is not None]
    if not found:
        return ""
    shown = [(r, pd) for r, pd in found if pd.get("available") and pd.get("stats_ms")]
    missing = [(r, pd) for r, pd in found if not (pd.get("available") and pd.get("stats_ms"))]
    ttft_terms = list(PD_TIME_TERMS[:-1])
    bars = []
    for result, pd in shown:
        stats = pd["stats_ms"]
        segments = tuple(Segment(t, float(stats[t]["p50"]), TERM_COLORS[t]) for t in ttft_terms if t in stats)
        total = sum(s.value for s in segments)
        words = ", ".join(f"{s.name} {s.value:.1f}" for s in segments)
        tip = f"{_label(result)}: TTFT terms' medians sum to {total:.1f} ms ({words})"
        bars.append(StackedBar(_label(result), segments, tip))
    parts = [
        "<p class='note'>Each P/D cell's measured requests, joined by request id across the client, the router "
        "and both engines (the engines' timing recorder); each bar stacks the median of each term of the time to "
        "first token, so its length is near, not equal to, the TTFT median. Per-request rows: results.json, "
        "evidence.pd_time of the throughput check (docs/methodology/pd-time.md).</p>",
        _legend(ttft_terms),
    ]
    if bars:
        parts.append(stacked_hbar_chart("Where P/D time to first token goes (median of each term)", bars, "ms"))
        parts.append(_table(shown))
    for result, pd in missing:
        why = pd.get("why") or "no request joined"
        parts.append(f"<p class='note'>{escape(result.cell.id)}: decomposition unavailable: {escape(str(why))}</p>")
    return "".join(parts)
