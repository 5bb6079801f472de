"""Tiny inline-SVG charts for summary.html: no JavaScript, no external assets."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

FONT = "font-family='system-ui,sans-serif' font-size='12'"
CHAR_PX = 7.2
"""A generous width of one character at the charts' 12 px (digits and lowercase of the sans fonts a
browser falls back to are narrower): what a label is sized and cut by, so it stays inside its box."""


@dataclass(frozen=True)
class Paint:
    """One colour of the report's data and the one thing it means, everywhere it is drawn."""

    color: str
    meaning: str


BASELINE = Paint("#00838f", "a cell on the baseline image")
OTHER_IMAGE = Paint("#f06292", "a cell on another image than the baseline")
HISTORY = Paint("#9e9d24", "an earlier run (sparklines)")
THIS_RUN = Paint("#283593", "this run, among earlier ones (sparklines)")
PALETTE: tuple[Paint, ...] = (BASELINE, OTHER_IMAGE, HISTORY, THIS_RUN)
"""The data colours of the report, each with one meaning in every chart (a legend says them; a test
keeps them distinct and apart from the verdict colours, which canary.judge.verdicts owns). Neutral
ink (INK, the greys below) draws axes, whiskers, medians and what is not to scale."""
DATA_COLORS = tuple(paint.color for paint in PALETTE)
BAR_COLORS = DATA_COLORS
INK = "#212121"
NOT_TO_SCALE_FILL = "#cfd8dc"
NOT_TO_SCALE_STROKE = "#546e7a"
"""Hatching of values that are drawn but not scaled to (an invalid measurement, a corrupted cell)."""
REFERENCE_COLOR = "#37474f"
"""A reference line (a gate): dashed, neutral, not the colour of a failure."""


def text_px(text: str, char_px: float = CHAR_PX) -> float:
    """The width a label is given (see CHAR_PX)."""
    return len(text) * char_px


def fit(text: str, width: float, char_px: float = CHAR_PX, *, keep_end: bool = False) -> str:
    """text cut with an ellipsis to fit width pixels (its end kept when keep_end: a cell id's image)."""
    most = max(int(width // char_px), 1)
    if len(text) <= most:
        return text
    if most == 1:
        return "…"
    return "…" + text[-(most - 1) :] if keep_end else text[: most - 1].rstrip() + "…"


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


MAX_LABEL_PX = 360.0
"""The widest a bar chart's labels get; a longer cell id keeps its end (the image) after an ellipsis."""


@dataclass(frozen=True)
class _Frame:
    """The horizontal axis of a row chart (bars, boxes): where value v lands, and the SVG lines that
    open the chart (title, hatch pattern where some rows are not to scale, ticks, unit)."""

    lines: list[str]
    label_width: int
    plot_w: float
    scale_max: float

    def x(self, value: float) -> float:
        return self.label_width + self.plot_w * min(max(value / self.scale_max, 0.0), 1.0)


def _row_frame(
    title: str, unit: str, *, width: int, height: int, top: int, bottom: int, label_width: int,
    axis_max: float, hatched: bool, empty: bool,
) -> _Frame:  # fmt: skip
    ticks = _ticks(axis_max)
    frame = _Frame([], label_width, width - label_width - 20, ticks[-1])
    out = frame.lines
    out += [*_open(title, width, height), f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>"]
    if hatched:
        out.append(
            f"<defs><pattern id='{hatch_id(title)}' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'>"
            f"<rect width='6' height='6' fill='{NOT_TO_SCALE_FILL}'/>"
            f"<line x1='0' y1='0' x2='0' y2='6' stroke='{NOT_TO_SCALE_STROKE}' stroke-width='2'/></pattern></defs>"
        )
    for tick in ticks:
        tx = frame.x(tick)
        out.append(f"<line x1='{tx:.1f}' y1='{top - 4}' x2='{tx:.1f}' y2='{height - bottom}' stroke='#e0e0e0'/>")
        out.append(f"<text x='{tx:.1f}' y='{height - bottom + 14}' text-anchor='middle'>{_fmt(tick)}</text>")
    out.append(f"<text x='{width - 4}' y='{height - 4}' text-anchor='end'>{escape(unit)}</text>")
    if empty:
        out.append(f"<text x='{label_width}' y='{top + 12}'>no data</text>")
    return frame


def hbar_chart(
    title: str,
    bars: list[Bar],
    unit: str,
    *,
    maximum: float | None = None,
    points: bool = False,
    reference: tuple[float, str] | None = None,
    label_width: int | None = None,
    width: int = 720,
) -> str:
    """Horizontal bars (or points with whiskers when points=True); an optional vertical reference line.

    Bars marked not_to_scale do not set the axis: they are hatched, cut at the axis end when larger
    (an arrow says so) and labelled with why and their value."""
    row_h, top, bottom = 18, 28, 28
    if label_width is None:  # as wide as the longest label (cut beyond MAX_LABEL_PX)
        label_width = int(min(max((text_px(b.label) for b in bars), default=60.0), MAX_LABEL_PX)) + 12
    width = max(width, int(text_px(title)) + 12, label_width + 260)
    height = top + bottom + row_h * max(len(bars), 1)
    scaled = [b for b in bars if not b.not_to_scale]
    values = [b.value for b in scaled] + [b.high for b in scaled if b.high is not None]
    if reference is not None:
        values.append(reference[0])
    axis_max = maximum if maximum is not None else max(values, default=0.0)
    frame = _row_frame(
        title, unit, width=width, height=height, top=top, bottom=bottom, label_width=label_width,
        axis_max=axis_max, hatched=len(scaled) < len(bars), empty=not bars,
    )  # fmt: skip
    plot_w, scale_max, pattern, x, out = frame.plot_w, frame.scale_max, hatch_id(title), frame.x, frame.lines
    for index, bar in enumerate(bars):
        y = top + index * row_h
        mid = y + row_h / 2
        tip = escape(bar.tooltip or f"{bar.label}: {_fmt(bar.value)} {unit}")
        out.append(f"<g><title>{tip}</title>")
        label = fit(bar.label, label_width - 10, keep_end=True)
        out.append(f"<text x='{label_width - 6}' y='{mid + 4:.1f}' text-anchor='end'>{escape(label)}</text>")
        if bar.not_to_scale:
            out += _not_to_scale(
                bar, x(bar.value), label_width, y, row_h, pattern, unit, cut=bar.value > scale_max, room=plot_w - 8
            )
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
            out.append(f"<line x1='{x1:.1f}' y1='{mid:.1f}' x2='{x2:.1f}' y2='{mid:.1f}' stroke='{INK}'/>")
            for xe in (x1, x2):
                out.append(f"<line x1='{xe:.1f}' y1='{mid - 4:.1f}' x2='{xe:.1f}' y2='{mid + 4:.1f}' stroke='{INK}'/>")
        out.append("</g>")
    if reference is not None:
        rx = x(reference[0])
        out.append(
            f"<line x1='{rx:.1f}' y1='{top - 6}' x2='{rx:.1f}' y2='{height - bottom}' stroke='{REFERENCE_COLOR}' "
            "stroke-dasharray='4 3'/>"
        )
        right = rx + 3 + text_px(reference[1]) > width - 2  # the label left of the line near the right edge
        anchor = f"x='{rx - 3:.1f}' text-anchor='end'" if right else f"x='{rx + 3:.1f}'"
        out.append(f"<text {anchor} y='{top - 8}' fill='{REFERENCE_COLOR}'>{escape(reference[1])}</text>")
    out.append("</svg>")
    return "\n".join(out)


def _not_to_scale(
    bar: Bar, end: float, left: int, y: float, row_h: int, pattern: str, unit: str, *, cut: bool, room: float
) -> list[str]:
    """A hatched bar with its label ('throughput invalid: 2400 ms, not comparable'), inside the plot
    (room pixels wide: the label loses its words, then is cut, to stay there)."""
    width = max(end - left, 6.0)
    label = f"{bar.not_to_scale}: {_fmt(bar.value)} {unit}, not comparable"
    if text_px(label) > room:
        label = fit(f"{bar.not_to_scale}: {_fmt(bar.value)} {unit}", room)
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
        out.append(f"<polyline points='{' '.join(path)}' fill='none' stroke='{HISTORY.color}' stroke-width='1.5'/>")
    for index, point in enumerate(points):
        last = index == len(points) - 1
        if point.judged and math.isfinite(point.value):
            radius = 2.6 if last else 1.4
            fill = THIS_RUN.color if last else HISTORY.color
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
    sub: str = ""
    """A second, smaller line under the text (what tells tiles of one position apart)."""


TILE_W = 150
"""The width of a heatmap tile; a position holding several tiles is this wide per tile, less a little."""
SHARED_TILE_W = 130
SUB_CHAR_PX = 6.2
"""CHAR_PX of a tile's second line (10 px)."""


def heatmap(title: str, rows: list[str], columns: list[str], tiles: dict[tuple[str, str], list[Tile]]) -> str:
    """A grid of coloured tiles: rows x columns; a position with several tiles is split across (its
    column widened so that each keeps room for its text). Each tile's text and second line are cut
    with an ellipsis to stay inside it; its tooltip says everything."""
    shared = {c: max((len(tiles.get((r, c), [])) for r in rows), default=1) for c in columns}
    widths = [TILE_W if shared[c] <= 1 else SHARED_TILE_W * shared[c] for c in columns]
    two_lines = any(t.sub for here in tiles.values() for t in here)
    cell_h, top = (40 if two_lines else 34), 46
    left = int(max((text_px(r) for r in rows), default=40.0)) + 16
    width = int(max(left + sum(widths) + 10, text_px(title) + 10))
    height = top + cell_h * max(len(rows), 1) + 10
    starts = [left + sum(widths[:i]) for i in range(len(columns))]
    out = [*_open(title, width, height), f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>"]
    for ci, column in enumerate(columns):
        label = fit(column, widths[ci] - 6)
        out.append(
            f"<text x='{starts[ci] + widths[ci] / 2:.1f}' y='{top - 8}' text-anchor='middle'>{escape(label)}</text>"
        )
    for ri, row in enumerate(rows):
        y = top + ri * cell_h
        out.append(f"<text x='{left - 8}' y='{y + cell_h / 2 + 4:.1f}' text-anchor='end'>{escape(row)}</text>")
        for ci, column in enumerate(columns):
            x0, cell_w = starts[ci], widths[ci]
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
                room, mid = part - 9, tx + part / 2
                line_y = y + cell_h / 2 + (0 if tile.sub else 4)
                out.append(
                    f"<text x='{mid:.1f}' y='{line_y:.1f}' text-anchor='middle' fill='#ffffff'>"
                    f"{escape(fit(tile.text, room))}</text>"
                )
                if tile.sub:
                    out.append(
                        f"<text x='{mid:.1f}' y='{line_y + 12:.1f}' text-anchor='middle' fill='#ffffff' "
                        f"font-size='10'>{escape(fit(tile.sub, room, SUB_CHAR_PX))}</text>"
                    )
                out.append(f"</g>{'</a>' if link else ''}")
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Box:
    """One row of a distribution chart: a whisker from low to high (p1 to p99), a box from q1 to
    q3 (p25 to p75) and the median; not_to_scale as Bar's."""

    label: str
    low: float
    q1: float
    median: float
    q3: float
    high: float
    tooltip: str = ""
    color: str = BASELINE.color
    not_to_scale: str = ""


def box_chart(title: str, boxes: list[Box], unit: str, *, width: int = 720) -> str:
    """Horizontal box plots, one row per box, on one axis from 0 (the scale set by the boxes that are
    to scale; the others hatched as in hbar_chart, labelled with their median)."""
    row_h, top, bottom = 20, 28, 28
    label_width = int(min(max((text_px(b.label) for b in boxes), default=60.0), MAX_LABEL_PX)) + 12
    width = max(width, int(text_px(title)) + 12, label_width + 260)
    height = top + bottom + row_h * max(len(boxes), 1)
    scaled = [b for b in boxes if not b.not_to_scale]
    frame = _row_frame(
        title, unit, width=width, height=height, top=top, bottom=bottom, label_width=label_width,
        axis_max=max((b.high for b in scaled), default=0.0), hatched=len(scaled) < len(boxes), empty=not boxes,
    )  # fmt: skip
    plot_w, scale_max, pattern, x, out = frame.plot_w, frame.scale_max, hatch_id(title), frame.x, frame.lines
    for index, box in enumerate(boxes):
        y = top + index * row_h
        mid = y + row_h / 2
        out.append(f"<g><title>{escape(box.tooltip or box.label)}</title>")
        label = fit(box.label, label_width - 10, keep_end=True)
        out.append(f"<text x='{label_width - 6}' y='{mid + 4:.1f}' text-anchor='end'>{escape(label)}</text>")
        if box.not_to_scale:
            bar = Bar(box.label, box.median, not_to_scale=box.not_to_scale)
            out += _not_to_scale(
                bar, x(box.median), label_width, y, row_h, pattern, unit, cut=box.median > scale_max, room=plot_w - 8
            )
            out.append("</g>")
            continue
        x1, q1, md, q3, x2 = (x(v) for v in (box.low, box.q1, box.median, box.q3, box.high))
        out.append(f"<line x1='{x1:.1f}' y1='{mid:.1f}' x2='{x2:.1f}' y2='{mid:.1f}' stroke='{INK}'/>")
        for xe in (x1, x2):
            out.append(f"<line x1='{xe:.1f}' y1='{mid - 4:.1f}' x2='{xe:.1f}' y2='{mid + 4:.1f}' stroke='{INK}'/>")
        out.append(
            f"<rect x='{q1:.1f}' y='{y + 3}' width='{max(q3 - q1, 1.0):.1f}' height='{row_h - 6}' "
            f"fill='{box.color}' stroke='{INK}' stroke-width='0.5'/>"
        )
        out.append(
            f"<line x1='{md:.1f}' y1='{y + 2}' x2='{md:.1f}' y2='{y + row_h - 2}' stroke='{INK}' stroke-width='2'/>"
        )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def scatter(
    title: str,
    points: Sequence[tuple[float, float]],
    x_unit: str,
    y_unit: str,
    *,
    color: str = BASELINE.color,
    width: int = 360,
    height: int = 140,
    label: str = "",
) -> str:
    """A small time series: one dot per (x, y), both axes from 0, a few ticks; the visible label is
    `label` (default the title), cut to fit keeping its end; the title is the tooltip."""
    left, right, top, bottom = 44, 10, 24, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    x_ticks = _ticks(max((p[0] for p in points), default=0.0), 3)
    y_ticks = _ticks(max((p[1] for p in points), default=0.0), 3)

    def x(value: float) -> float:
        return left + plot_w * min(max(value / x_ticks[-1], 0.0), 1.0)

    def y(value: float) -> float:
        return top + plot_h * (1.0 - min(max(value / y_ticks[-1], 0.0), 1.0))

    shown = fit(label or title, width - 8, keep_end=True)
    out = [*_open(title, width, height), f"<text x='4' y='14' font-weight='bold'>{escape(shown)}</text>"]
    for tick in x_ticks:
        out.append(f"<line x1='{x(tick):.1f}' y1='{top}' x2='{x(tick):.1f}' y2='{top + plot_h}' stroke='#e0e0e0'/>")
        anchor = "end" if tick == x_ticks[-1] else "middle"
        out.append(f"<text x='{x(tick):.1f}' y='{top + plot_h + 13}' text-anchor='{anchor}'>{_fmt(tick)}</text>")
    for tick in y_ticks:
        out.append(f"<line x1='{left}' y1='{y(tick):.1f}' x2='{left + plot_w}' y2='{y(tick):.1f}' stroke='#e0e0e0'/>")
        out.append(f"<text x='{left - 4}' y='{y(tick) + 4:.1f}' text-anchor='end'>{_fmt(tick)}</text>")
    out.append(f"<text x='{width - right}' y='{height - 3}' text-anchor='end'>{escape(x_unit)}</text>")
    out.append(f"<text x='4' y='{height - 3}'>{escape(y_unit)}</text>")
    out += [f"<circle cx='{x(px):.1f}' cy='{y(py):.1f}' r='2' fill='{color}'/>" for px, py in points]
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Segment:
    """One part of a stacked bar: what it is (its legend name), how long, its colour."""

    name: str
    value: float
    color: str


@dataclass(frozen=True)
class StackedBar:
    """One row of a stacked horizontal bar chart: parts left to right, drawn in order."""

    label: str
    segments: tuple[Segment, ...]
    tooltip: str = ""


def stacked_hbar_chart(title: str, bars: list[StackedBar], unit: str, *, width: int = 720) -> str:
    """Horizontal bars made of segments laid end to end (each with its own tooltip); the axis runs to the
    longest bar. Negative parts are drawn as nothing (a caller reports them)."""
    row_h, top, bottom = 22, 28, 28
    label_width = int(min(max((text_px(b.label) for b in bars), default=60.0), MAX_LABEL_PX)) + 12
    width = max(width, int(text_px(title)) + 12, label_width + 260)
    height = top + bottom + row_h * max(len(bars), 1)
    totals = [sum(max(s.value, 0.0) for s in b.segments) for b in bars]
    frame = _row_frame(
        title, unit, width=width, height=height, top=top, bottom=bottom, label_width=label_width,
        axis_max=max(totals, default=0.0), hatched=False, empty=not bars,
    )  # fmt: skip
    out = frame.lines
    for index, bar in enumerate(bars):
        y = top + index * row_h
        label = fit(bar.label, label_width - 10, keep_end=True)
        tip = escape(bar.tooltip or f"{bar.label}: {_fmt(totals[index])} {unit}")
        out.append(
            f"<g><title>{tip}</title><text x='{label_width - 6}' y='{y + row_h / 2 + 4:.1f}' "
            f"text-anchor='end'>{escape(label)}</text></g>"
        )
        start = 0.0
        for segment in bar.segments:
            value = max(segment.value, 0.0)
            x1, x2 = frame.x(start), frame.x(start + value)
            start += value
            out.append(
                f"<g><title>{escape(f'{bar.label} {segment.name}: {_fmt(segment.value)} {unit}')}</title>"
                f"<rect x='{x1:.1f}' y='{y + 3}' width='{max(x2 - x1, 0.0):.1f}' height='{row_h - 6}' "
                f"fill='{segment.color}'/></g>"
            )
    out.append("</svg>")
    return "\n".join(out)
