"""The latency-vs-rate chart of an SLO capacity search, inline SVG for summary.html.

Three panels share one horizontal axis, the offered rate on a log scale (the search's rates are
geometric): the p99 TTFT and the p99 ITL of each probe with the SLO's limit as a dashed line, and
the attainment of each probe with its Wilson interval and the target share as a dashed line. The
capacity estimate is a solid vertical line, its confident interval a grey band (a missing end: the
band runs to the plot's edge and its label says "below" or "above"). A probe where the SLO held is a
filled dot, one where it failed a hollow dot, an over-saturated or unmeasurable probe a cross; a
latency beyond the panel's top is a triangle on the top edge (its value in the tooltip).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from canary.core.svg import BASELINE, INK, REFERENCE_COLOR, _fmt, _open, _ticks, fit

Scale = Callable[[float], float]
"""A value's pixel position along an axis."""
BAND = "#eceff1"
"""The capacity interval's band: neutral, behind the data."""


@dataclass(frozen=True)
class RateProbe:
    """One probe of the search: its offered rate, p99 latencies (ms; None: not measured), attainment
    with its interval, and whether the SLO held (`passes`) or why it could not (`note`)."""

    rate: float
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    attainment: float
    attainment_low: float
    attainment_high: float
    passes: bool
    note: str = ""
    """Over-saturated or not measurable (invalid), in words; '' when neither."""


@dataclass(frozen=True)
class RateChart:
    """What the chart shows besides the probes: the SLO and the search's answer (req/s; None: none)."""

    title: str
    subtitle: str
    detail: str
    ttft_limit_ms: float
    itl_limit_ms: float
    itl_label: str
    target: float
    estimate: float | None
    low: float | None
    high: float | None
    color: str = BASELINE.color


WIDTH, LEFT, RIGHT, TOP, PANEL_H, GAP, BOTTOM = 640, 64, 24, 78, 96, 30, 52


def _rate_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks within [low, high] (at least the ends' neighbours when none falls inside)."""
    out = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        out += [m * 10.0**exponent for m in (1, 2, 5) if low <= m * 10.0**exponent <= high]
    return out or [low, high]


def rate_chart(chart: RateChart, probes: Sequence[RateProbe]) -> str:
    """The SVG (see the module docstring); probes in any order."""
    rates = [p.rate for p in probes] + [r for r in (chart.estimate, chart.low, chart.high) if r is not None]
    lo, hi = (min(rates) / 1.4, max(rates) * 1.4) if rates else (0.5, 2.0)
    plot_w = WIDTH - LEFT - RIGHT
    height = TOP + 3 * PANEL_H + 2 * GAP + BOTTOM

    def x(rate: float) -> float:
        return LEFT + plot_w * (math.log(rate) - math.log(lo)) / (math.log(hi) - math.log(lo))

    out = [
        *_open(f"{chart.title}: {chart.subtitle}; {chart.detail}", WIDTH, height),
        f"<text x='4' y='16' font-weight='bold'>{escape(fit(chart.title, WIDTH - 8, keep_end=True))}</text>",
        f"<text x='4' y='32'>{escape(fit(chart.subtitle, WIDTH - 8))}</text>",
        f"<text x='4' y='48' font-size='11'>{escape(fit(chart.detail, WIDTH - 8, 6.6))}</text>",
    ]
    tops = [TOP + i * (PANEL_H + GAP) for i in range(3)]
    bottom = tops[-1] + PANEL_H
    out += _band(chart, x, LEFT, LEFT + plot_w, tops[0], bottom)
    panels = (
        ("p99 TTFT", "ms", [p.ttft_p99_ms for p in probes], chart.ttft_limit_ms, f"SLO {_fmt(chart.ttft_limit_ms)} ms"),
        (
            f"p99 ITL{chart.itl_label}",
            "ms",
            [p.itl_p99_ms for p in probes],
            chart.itl_limit_ms,
            f"SLO {_fmt(chart.itl_limit_ms)} ms",
        ),
    )
    for (label, unit, values, limit, limit_label), top in zip(panels, tops, strict=False):
        out += _latency_panel(label, unit, probes, values, limit, limit_label, top, x, chart.color)
    out += _attainment_panel(chart, probes, tops[2], x)
    for tick in _rate_ticks(lo, hi):
        tx = x(tick)
        out.append(f"<line x1='{tx:.1f}' y1='{tops[0]}' x2='{tx:.1f}' y2='{bottom}' stroke='#e0e0e0'/>")
        out.append(f"<text x='{tx:.1f}' y='{bottom + 14}' text-anchor='middle'>{_fmt(tick)}</text>")
    out.append(f"<text x='{WIDTH - RIGHT}' y='{bottom + 28}' text-anchor='end'>offered rate (req/s, log scale)</text>")
    out.append(
        f"<text x='4' y='{height - 6}' font-size='11'>● SLO held  ○ SLO failed  × over-saturated or not "
        "measurable  ▲ above the panel</text>"
    )
    if chart.estimate is not None:
        ex = x(chart.estimate)
        out.append(
            f"<line class='estimate' x1='{ex:.1f}' y1='{tops[0]}' x2='{ex:.1f}' y2='{bottom}' stroke='{INK}' "
            "stroke-width='1.5'/>"
        )
        left_of = ex > WIDTH - RIGHT - 90  # near the right edge: the words left of the line
        place = f"x='{ex - 3:.1f}' text-anchor='end'" if left_of else f"x='{ex + 3:.1f}'"
        out.append(
            f"<text {place} y='{tops[0] + 12}' font-size='11' stroke='#ffffff' stroke-width='3' "
            f"paint-order='stroke'>capacity {_fmt(chart.estimate)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _band(chart: RateChart, x: Scale, left: float, right: float, top: float, bottom: float) -> list[str]:
    """The confident interval as a band (to the plot's edge where an end is missing), with its words."""
    if chart.low is None and chart.high is None:
        return []
    x1 = left if chart.low is None else x(chart.low)
    x2 = right if chart.high is None else x(chart.high)
    return [
        f"<rect class='interval' x='{x1:.1f}' y='{top}' width='{max(x2 - x1, 1.0):.1f}' "
        f"height='{bottom - top}' fill='{BAND}'/>"
    ]


def _mark(cx: float, cy: float, probe: RateProbe, color: str, tooltip: str, *, off_scale: bool = False) -> str:
    """A probe's mark (see the module docstring) with its tooltip."""
    if off_scale:
        shape = (
            f"<path class='off-scale' d='M{cx - 5:.1f},{cy + 6:.1f} L{cx:.1f},{cy:.1f} L{cx + 5:.1f},{cy + 6:.1f} Z' "
            f"fill='{INK}'/>"
        )
    elif probe.note:
        shape = (
            f"<path d='M{cx - 4:.1f},{cy - 4:.1f} L{cx + 4:.1f},{cy + 4:.1f} M{cx - 4:.1f},{cy + 4:.1f} "
            f"L{cx + 4:.1f},{cy - 4:.1f}' stroke='{INK}' stroke-width='2'/>"
        )
    elif probe.passes:
        shape = f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='4' fill='{color}'/>"
    else:
        shape = f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='4' fill='#ffffff' stroke='{color}' stroke-width='2'/>"
    return (
        f"<g class='probe' data-rate='{probe.rate:.10g}' data-y='{cy:.2f}'><title>{escape(tooltip)}</title>{shape}</g>"
    )


def _axis(top: float, label: str, ticks: Sequence[float], y: Scale, fmt: Callable[[float], str] = _fmt) -> list[str]:
    out = [f"<text x='{LEFT}' y='{top - 7}' font-size='11' font-weight='bold'>{escape(label)}</text>"]
    for tick in ticks:
        ty = y(tick)
        out.append(f"<line x1='{LEFT}' y1='{ty:.1f}' x2='{WIDTH - RIGHT}' y2='{ty:.1f}' stroke='#f0f0f0'/>")
        out.append(f"<text x='{LEFT - 4}' y='{ty + 4:.1f}' text-anchor='end'>{escape(fmt(tick))}</text>")
    return out


def _slo_line(y: float, label: str, what: str) -> list[str]:
    return [
        f"<line class='slo' data-slo='{what}' x1='{LEFT}' y1='{y:.2f}' x2='{WIDTH - RIGHT}' y2='{y:.2f}' "
        f"stroke='{REFERENCE_COLOR}' stroke-dasharray='5 3'/>",
        f"<text x='{LEFT + 4}' y='{y - 3:.1f}' fill='{REFERENCE_COLOR}' font-size='11'>{escape(label)}</text>",
    ]


def _latency_panel(
    label: str,
    unit: str,
    probes: Sequence[RateProbe],
    values: Sequence[float | None],
    limit: float,
    limit_label: str,
    top: float,
    x: Scale,
    color: str,
) -> list[str]:
    """One latency panel: linear from 0 to a round value above the limit (about 2.5x it at most; beyond: ▲)."""
    seen = [v for v in values if v is not None]
    ticks = _ticks(max(limit * 1.25, min(max(seen, default=0.0), limit * 2.5)), 3)
    top_value = ticks[-1]

    def y(value: float) -> float:
        return top + PANEL_H * (1.0 - min(max(value / top_value, 0.0), 1.0))

    what = "ttft" if "TTFT" in label else "itl"
    out = [f"<g class='panel' data-panel='{what}'>", *_axis(top, f"{label} ({unit})", ticks[1:], y)]
    out += _slo_line(y(limit), limit_label, what)
    for probe, value in zip(probes, values, strict=True):
        if value is None:
            continue
        tip = f"{_fmt(probe.rate)} req/s: {label} {_fmt(value)} {unit}" + (f"; {probe.note}" if probe.note else "")
        out.append(_mark(x(probe.rate), y(value), probe, color, tip, off_scale=value > top_value))
    return [*out, "</g>"]


def _attainment_panel(chart: RateChart, probes: Sequence[RateProbe], top: float, x: Scale) -> list[str]:
    """Attainment 0..1 with each probe's Wilson interval (a whisker) and the target share."""

    def y(value: float) -> float:
        return top + PANEL_H * (1.0 - min(max(value, 0.0), 1.0))

    out = [
        "<g class='panel' data-panel='attainment'>",
        *_axis(top, "attainment (share meeting the SLO)", (0.5, 1.0), y, lambda v: f"{v:.0%}"),
    ]
    out += _slo_line(y(chart.target), f"target {chart.target:.0%}", "attainment")
    for probe in probes:
        px = x(probe.rate)
        out.append(
            f"<line x1='{px:.1f}' y1='{y(probe.attainment_low):.1f}' x2='{px:.1f}' y2='{y(probe.attainment_high):.1f}' "
            f"stroke='{INK}'/>"
        )
        tip = (
            f"{_fmt(probe.rate)} req/s: attainment {probe.attainment:.1%} [{probe.attainment_low:.1%}, "
            f"{probe.attainment_high:.1%}], SLO {'held' if probe.passes else 'failed'}"
            + (f"; {probe.note}" if probe.note else "")
        )
        out.append(_mark(px, y(probe.attainment), probe, chart.color, tip))
    return [*out, "</g>"]
