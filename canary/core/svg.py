"""Tiny inline-SVG charts for summary.html: no JavaScript, no external assets."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

FONT = "font-family='system-ui,sans-serif' font-size='12'"
DATA_COLORS = ("#00838f", "#f06292", "#9e9d24", "#283593")
"""Colours of data (bars, lines, sparklines): none is, or looks like, a verdict colour
(canary.judge.verdicts owns those; a test keeps them apart), so a bar never reads as a verdict."""
BAR_COLORS = DATA_COLORS
NOT_TO_SCALE_FILL = "#cfd8dc"
NOT_TO_SCALE_STROKE = "#546e7a"
"""Hatching of values that are drawn but not scaled to (an invalid measurement, a corrupted cell)."""
REFERENCE_COLOR = "#37474f"
"""A reference line (a gate): dashed, neutral, not the colour of a failure."""


@dataclass(frozen=True)
class Bar:
    """One row of a horizontal bar chart: a label, a value, an optional range (whisker) and tooltip."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None
    tooltip: str = ""
    color: str = BAR_COLORS[0]
    not_to_scale: str = ""
    """Why this value is not comparable (e.g. 'throughput invalid'): drawn hatched and labelled,
    left out of the axis scale, so one absurd value does not squash the others."""


def _ticks(maximum: float, count: int = 4) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) from 0 to at least maximum."""
    if maximum <= 0:
        return [0.0, 1.0]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * i for i in range(math.ceil(maximum / step - 1e-9) + 1)]


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _open(title: str, width: int, height: int) -> list[str]:
    """An SVG that scales down with its container (viewBox), with its title."""
    return [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"{FONT} role='img'>",
        f"<title>{escape(title)}</title>",
    ]


def hatch_id(title: str) -> str:
    """The id of a chart's hatch pattern: unique per chart title in a page, stable across renders."""
    return f"hatch-{zlib.crc32(title.encode()):08x}"


def hbar_chart(
    title: str,
    bars: list[Bar],
    unit: str,
    *,
    maximum: float | None = None,
    points: bool = False,
    reference: tuple[float, str] | None = None,
    label_width: int = 300,
    width: int = 720,
) -> str:
    """Horizontal bars (or points with whiskers when points=True); an optional vertical reference line.

    Bars marked not_to_scale do not set the axis: they are hatched, cut at the axis end when larger
    (an arrow says so) and labelled with why and their value."""
    row_h, top, bottom = 18, 28, 28
    plot_w = width - label_width - 20
    height = top + bottom + row_h * max(len(bars), 1)
    scaled = [b for b in bars if not b.not_to_scale]
    values = [b.value for b in scaled] + [b.high for b in scaled if b.high is not None]
    if reference is not None:
        values.append(reference[0])
    ticks = _ticks(maximum if maximum is not None else max(values, default=0.0))
    scale_max = ticks[-1]
    pattern = hatch_id(title)

    def x(value: float) -> float:
        return label_width + plot_w * min(max(value / scale_max, 0.0), 1.0)

    out = [*_open(title, width, height), f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>"]
    if len(scaled) < len(bars):
        out.append(
            f"<defs><pattern id='{pattern}' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'>"
            f"<rect width='6' height='6' fill='{NOT_TO_SCALE_FILL}'/>"
            f"<line x1='0' y1='0' x2='0' y2='6' stroke='{NOT_TO_SCALE_STROKE}' stroke-width='2'/></pattern></defs>"
        )
    for tick in ticks:
        tx = x(tick)
        out.append(f"<line x1='{tx:.1f}' y1='{top - 4}' x2='{tx:.1f}' y2='{height - bottom}' stroke='#e0e0e0'/>")
        out.append(f"<text x='{tx:.1f}' y='{height - bottom + 14}' text-anchor='middle'>{_fmt(tick)}</text>")
    out.append(f"<text x='{width - 4}' y='{height - 4}' text-anchor='end'>{escape(unit)}</text>")
    if not bars:
        out.append(f"<text x='{label_width}' y='{top + 12}'>no data</text>")
    for index, bar in enumerate(bars):
        y = top + index * row_h
        mid = y + row_h / 2
        tip = escape(bar.tooltip or f"{bar.label}: {_fmt(bar.value)} {unit}")
        out.append(f"<g><title>{tip}</title>")
        out.append(f"<text x='{label_width - 6}' y='{mid + 4:.1f}' text-anchor='end'>{escape(bar.label[:48])}</text>")
        if bar.not_to_scale:
            out += _not_to_scale(bar, x(bar.value), label_width, y, row_h, pattern, unit, cut=bar.value > scale_max)
            out.append("</g>")
            continue
        if points:
            out.append(f"<circle cx='{x(bar.value):.1f}' cy='{mid:.1f}' r='4' fill='{bar.color}'/>")
        else:
            out.append(
                f"<rect x='{label_width}' y='{y + 3}' width='{max(x(bar.value) - label_width, 1):.1f}' "
                f"height='{row_h - 6}' fill='{bar.color}'/>"
            )
        if bar.low is not None and bar.high is not None:
            x1, x2 = x(bar.low), x(bar.high)
            out.append(f"<line x1='{x1:.1f}' y1='{mid:.1f}' x2='{x2:.1f}' y2='{mid:.1f}' stroke='#212121'/>")
            for xe in (x1, x2):
                out.append(
                    f"<line x1='{xe:.1f}' y1='{mid - 4:.1f}' x2='{xe:.1f}' y2='{mid + 4:.1f}' stroke='#212121'/>"
                )
        out.append("</g>")
    if reference is not None:
        rx = x(reference[0])
        out.append(
            f"<line x1='{rx:.1f}' y1='{top - 6}' x2='{rx:.1f}' y2='{height - bottom}' stroke='{REFERENCE_COLOR}' "
            "stroke-dasharray='4 3'/>"
        )
        out.append(f"<text x='{rx + 3:.1f}' y='{top - 8}' fill='{REFERENCE_COLOR}'>{escape(reference[1])}</text>")
    out.append("</svg>")
    return "\n".join(out)


def _not_to_scale(
    bar: Bar, end: float, left: int, y: float, row_h: int, pattern: str, unit: str, *, cut: bool
) -> list[str]:
    """A hatched bar with its label ('throughput invalid: 2400 ms, not comparable'), inside the plot."""
    width = max(end - left, 6.0)
    label = f"{bar.not_to_scale}: {_fmt(bar.value)} {unit}, not comparable"
    out = [
        f"<rect class='not-to-scale' x='{left}' y='{y + 3}' width='{width:.1f}' height='{row_h - 6}' "
        f"fill='url(#{pattern})' stroke='{NOT_TO_SCALE_STROKE}'/>"
    ]
    if cut:  # larger than the axis: an arrow at the end
        tip = left + width
        out.append(
            f"<path d='M{tip - 6:.1f},{y + 2} L{tip:.1f},{y + row_h / 2:.1f} L{tip - 6:.1f},{y + row_h - 2}' "
            f"fill='none' stroke='{NOT_TO_SCALE_STROKE}' stroke-width='2'/>"
        )
    # the label sits on a white box at the bar's start, so it reads on any hatch length
    out.append(
        f"<text x='{left + 4}' y='{y + row_h / 2 + 4:.1f}' fill='#263238' stroke='#ffffff' stroke-width='3' "
        f"paint-order='stroke'>{escape(label)}</text>"
    )
    return out


@dataclass(frozen=True)
class Spark:
    """One run's value in a sparkline; judged=False: not comparable (grey mark, never scaled to)."""

    value: float
    judged: bool
    tooltip: str


def sparkline(title: str, points: Sequence[Spark], *, width: int = 120, height: int = 26) -> str:
    """A tiny line of a metric over the recent runs (oldest left, this run right, as a dot).

    Judged values draw the line and set the scale; the others are grey ticks on the bottom edge."""
    pad = 3.0
    judged = [p.value for p in points if p.judged and math.isfinite(p.value)]
    low, high = min(judged, default=0.0), max(judged, default=1.0)
    if high == low:
        low, high = low - (abs(low) * 0.05 or 0.5), high + (abs(high) * 0.05 or 0.5)
    count = max(len(points), 2)

    def x(index: int) -> float:
        return pad + (width - 2 * pad) * index / (count - 1)

    def y(value: float) -> float:
        return height - pad - (height - 2 * pad) * (value - low) / (high - low)

    out = [*_open(title, width, height), f"<rect width='{width}' height='{height}' fill='#fafafa'/>"]
    path = [f"{x(i):.1f},{y(p.value):.1f}" for i, p in enumerate(points) if p.judged and math.isfinite(p.value)]
    if len(path) > 1:
        out.append(f"<polyline points='{' '.join(path)}' fill='none' stroke='{DATA_COLORS[0]}' stroke-width='1.5'/>")
    for index, point in enumerate(points):
        last = index == len(points) - 1
        if point.judged and math.isfinite(point.value):
            radius = 2.6 if last else 1.4
            fill = DATA_COLORS[3] if last else DATA_COLORS[0]
            mark = f"<circle cx='{x(index):.1f}' cy='{y(point.value):.1f}' r='{radius}' fill='{fill}'/>"
        else:
            mark = (
                f"<line class='not-to-scale' x1='{x(index):.1f}' y1='{height - 1}' x2='{x(index):.1f}' "
                f"y2='{height - 7}' stroke='{NOT_TO_SCALE_STROKE}' stroke-width='2'/>"
            )
        out.append(f"<g><title>{escape(point.tooltip)}</title>{mark}</g>")
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Tile:
    """One coloured tile of a heatmap position (several when cells share a position)."""

    color: str
    text: str
    tooltip: str
    href: str = ""
    """Where a click on the tile goes (the cell's details), if anywhere."""


def heatmap(title: str, rows: list[str], columns: list[str], tiles: dict[tuple[str, str], list[Tile]]) -> str:
    """A grid of coloured tiles: rows x columns; a position with several tiles is split across."""
    cell_w, cell_h, left, top = 150, 34, 90, 46
    width = max(left + cell_w * max(len(columns), 1) + 10, 8 * len(title) + 10)
    height = top + cell_h * max(len(rows), 1) + 10
    out = [*_open(title, width, height), f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>"]
    for ci, column in enumerate(columns):
        out.append(
            f"<text x='{left + ci * cell_w + cell_w / 2:.1f}' y='{top - 8}' "
            f"text-anchor='middle'>{escape(column)}</text>"
        )
    for ri, row in enumerate(rows):
        y = top + ri * cell_h
        out.append(f"<text x='{left - 8}' y='{y + cell_h / 2 + 4:.1f}' text-anchor='end'>{escape(row)}</text>")
        for ci, column in enumerate(columns):
            x0 = left + ci * cell_w
            here = tiles.get((row, column), [])
            if not here:
                out.append(
                    f"<rect x='{x0 + 1}' y='{y + 1}' width='{cell_w - 2}' height='{cell_h - 2}' fill='#fafafa' "
                    "stroke='#e0e0e0'/>"
                )
                continue
            part = (cell_w - 2) / len(here)
            for ti, tile in enumerate(here):
                tx = x0 + 1 + ti * part
                link = f"<a href='{escape(tile.href)}'>" if tile.href else ""
                out.append(f"{link}<g><title>{escape(tile.tooltip)}</title>")
                out.append(
                    f"<rect x='{tx:.1f}' y='{y + 1}' width='{part - 1:.1f}' height='{cell_h - 2}' fill='{tile.color}'/>"
                )
                out.append(
                    f"<text x='{tx + part / 2:.1f}' y='{y + cell_h / 2 + 4:.1f}' text-anchor='middle' "
                    f"fill='#ffffff'>{escape(tile.text)}</text></g>{'</a>' if link else ''}"
                )
    out.append("</svg>")
    return "\n".join(out)
