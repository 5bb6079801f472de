"""The SLO capacity searches of a run (evidence.capacity of the throughput checks) and the
disaggregation gains of its P/D cells (canary.judge.capacity_gain), for summary.html and summary.md.

HTML: per cell that searched, the latency-vs-rate chart (canary.core.svg_rate) with the SLO's limits
and the estimate with its interval; then the gains, one row per image, backend and P/D block size,
every row saying the assumption it rests on. Markdown: one line per cell with its capacity and
interval, and the same gain table. A search that found nothing says so; a missing interval end
reads "below" or "above", never a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from canary.core.svg_rate import RateChart, RateProbe, rate_chart
from canary.export.report.grid import anchor
from canary.judge.capacity_gain import CAPACITY_EVIDENCE_KEY, Capacity, Gain, assumption, gains
from canary.judge.results import CellResult, RunResult


@dataclass(frozen=True)
class Search:
    """One cell's capacity search as the check recorded it (or why it was skipped)."""

    result: CellResult
    evidence: dict[str, Any]

    @property
    def skipped(self) -> str:
        """Why no search ran ('' when it ran)."""
        return str(self.evidence.get("skipped", ""))

    @property
    def capacity(self) -> Capacity:
        """The estimate and its interval."""
        low, high = (self.evidence.get("interval") or [None, None])[:2]
        return Capacity(self.evidence.get("estimate_rate"), low, high)

    def slo_text(self) -> str:
        """'TTFT <= 1000 ms and ITL p99 <= 50 ms for 90% of requests'."""
        slo = self.evidence.get("slo") or {}
        return (
            f"TTFT <= {float(slo.get('ttft_s', 0)) * 1e3:.0f} ms and ITL {slo.get('itl_statistic', 'p99')} <= "
            f"{float(slo.get('itl_s', 0)) * 1e3:.0f} ms for {float(slo.get('attainment', 0)):.0%} of requests"
        )

    def headline(self) -> str:
        """'SLO capacity 6 req/s [5.5, 6.6]', or that no rate held it (and its interval)."""
        found = self.capacity
        if found.estimate is not None:
            return f"SLO capacity {found.text()}"
        low = "below" if found.low is None else f"{found.low:.3g}"
        high = "above" if found.high is None else f"{found.high:.3g}"
        return f"no rate held the SLO (interval [{low}, {high}] req/s)"

    def spent(self) -> str:
        """What the search spent and why it stopped."""
        requests, seconds = int(self.evidence.get("requests_used", 0)), float(self.evidence.get("seconds_used", 0))
        probes = len(self.evidence.get("curve", []))
        return f"{probes} probes, {requests} requests, {seconds:.0f} s; stopped: {self.evidence.get('stop_reason', '')}"

    def line(self) -> str:
        """One line for people: capacity, interval, what it spent and why it stopped."""
        if self.skipped:
            return f"no capacity search: {self.skipped}"
        return f"{self.headline()}; {self.spent()}"


def searches(run: RunResult) -> list[Search]:
    """Every cell whose throughput check carries a capacity block, in run order."""
    out = []
    for result in run.cells:
        check = result.check("throughput")
        block = check.evidence.get(CAPACITY_EVIDENCE_KEY) if check is not None else None
        if isinstance(block, dict):
            out.append(Search(result, block))
    return out


def probes(evidence: dict[str, Any]) -> list[RateProbe]:
    """The curve of a search as chart probes (latencies in ms)."""
    out = []
    for row in evidence.get("curve", []):

        def ms(key: str, row: dict[str, Any] = row) -> float | None:
            value = row.get(key)
            return None if value is None else float(value) * 1e3

        note = row.get("saturated") or (f"not measurable: {row['invalid']}" if row.get("invalid") else "")
        out.append(
            RateProbe(
                rate=float(row["offered_rate"]),
                ttft_p99_ms=ms("ttft_p99_s"),
                itl_p99_ms=ms("itl_p99_s"),
                attainment=float(row.get("attainment", 0.0)),
                attainment_low=float(row.get("attainment_low", 0.0)),
                attainment_high=float(row.get("attainment_high", 0.0)),
                passes=bool(row.get("passes", False)),
                note=str(note or ""),
            )
        )
    return out


def chart(search: Search, color: str) -> str:
    """The latency-vs-rate SVG of one search."""
    slo = search.evidence.get("slo") or {}
    found = search.capacity
    statistic = str(slo.get("itl_statistic", "p99"))
    return rate_chart(
        RateChart(
            title=search.result.cell.id,
            subtitle=search.headline(),
            detail=search.spent(),
            ttft_limit_ms=float(slo.get("ttft_s", 1.0)) * 1e3,
            itl_limit_ms=float(slo.get("itl_s", 0.05)) * 1e3,
            itl_label="" if statistic == "p99" else f" (SLO on each request's {statistic} gap)",
            target=float(slo.get("attainment", 0.9)),
            estimate=found.estimate,
            low=found.low,
            high=found.high,
            color=color,
        ),
        probes(search.evidence),
    )


GAIN_HEADERS = ("image", "backend", "P/D block", "P/D cell", "P/D capacity", "control", "control capacity", "gain")


def _gain_text(gain: Gain) -> str:
    if gain.gain is None:
        return f"none: {gain.skipped}"
    low = "below" if gain.low is None else f"{gain.low:.3g}"
    high = "above" if gain.high is None else f"{gain.high:.3g}"
    return f"{gain.gain:.3g} [{low}, {high}] (control x{gain.scale:g})"


def gain_rows(run: RunResult) -> list[tuple[CellResult, Gain, list[str]]]:
    """Per P/D cell with a gain block: its cells of the table (GAIN_HEADERS), by image, backend, block."""
    rows = []
    for result, gain in gains(run.cells):
        cell = result.cell
        values = [
            cell.image,
            cell.backend,
            cell.block_label,
            cell.id,
            gain.pd.text(),
            gain.control_cell or "-",
            gain.control.text() if gain.control is not None else "-",
            _gain_text(gain),
        ]
        rows.append((result, gain, values))
    return sorted(rows, key=lambda r: (r[0].cell.image, r[0].cell.backend, r[0].cell.prefill_block_size))


def assumptions(run: RunResult) -> list[str]:
    """The assumption sentence of every scale the run's gains used (once each)."""
    return sorted({assumption(g.scale) for _, g in gains(run.cells) if g.gain is not None})


def html_section(run: RunResult, colors: dict[str, str]) -> str:
    """The HTML section (nothing when no cell searched): charts per cell, then the gain table."""
    found = searches(run)
    if not found:
        return ""
    ran = [s for s in found if not s.skipped]
    skipped = "".join(
        f"<li><a href='#{escape(anchor(s.result.cell.id))}'><code>{escape(s.result.cell.id)}</code></a>: "
        f"{escape(s.skipped)}</li>"
        for s in found
        if s.skipped
    )
    slo = f"<p class='note'>SLO: {escape(ran[0].slo_text())}.</p>" if ran else ""
    charts = "".join(chart(s, colors.get(s.result.cell.id, "")) for s in ran)
    parts = [
        "<h2 id='capacity'>SLO capacity</h2>",
        "<p class='note'>The highest open-loop request rate at which the SLO held, per cell "
        "(checks.throughput.capacity): each probe's p99 TTFT and ITL against its offered rate with the SLO's "
        "limits (dashed), its attainment with its Wilson interval against the target share; the solid "
        "vertical line is the estimate, the grey band its confident interval (an end no probe established "
        "reads below / above). Informational: no verdict depends on it.</p>",
        slo,
        f"<div class='grid'>{charts}</div>",
        f"<p>Not searched:</p><ul>{skipped}</ul>" if skipped else "",
    ]
    rows = gain_rows(run)
    if rows:
        head = "".join(f"<th>{escape(h)}</th>" for h in GAIN_HEADERS)
        body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in values) + "</tr>" for _, _, values in rows)
        said = " ".join(f"{escape(a[0].upper() + a[1:])}." for a in assumptions(run))
        parts.append(
            "<h3 id='disaggregation-gain'>Disaggregation gain per backend and block size</h3>"
            "<p class='note'>A P/D cell's SLO capacity over its aggregated control's at equal engine count: "
            f"gain = P/D / (scale x control); interval from opposite ends of the two intervals. {said}</p>"
            f"<div class='scroll'><table class='gain'><tr>{head}</tr>{body}</table></div>"
        )
    return "".join(parts)


def markdown_lines(run: RunResult) -> list[str]:
    """The Markdown section (nothing when no cell searched): a line per cell, then the gain table."""
    found = searches(run)
    if not found:
        return []
    ran = [s for s in found if not s.skipped]
    lines = ["## SLO capacity", ""]
    if ran:
        lines += [f"SLO: {ran[0].slo_text()} (informational: no verdict depends on it).", ""]
    lines += [f"- [`{s.result.cell.id}`](#{anchor(s.result.cell.id)}): {s.line()}" for s in found]
    lines.append("")
    rows = gain_rows(run)
    if rows:
        lines += ["### Disaggregation gain per backend and block size", ""]
        lines += [f"{a[0].upper() + a[1:]}." for a in assumptions(run)] + [""]
        lines += ["| " + " | ".join(GAIN_HEADERS) + " |", "|" + "---|" * len(GAIN_HEADERS)]
        lines += ["| " + " | ".join(v.replace("|", "\\|") for v in values) + " |" for _, _, values in rows]
        lines.append("")
    return lines
