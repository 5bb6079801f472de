"""Tiny inline-SVG charts for summary.html: no JavaScript, no external assets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

FONT = "font-family='system-ui,sans-serif' font-size='12'"
BAR_COLORS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")


@dataclass(frozen=True)
class Bar:
    """One row of a horizontal bar chart: a label, a value, an optional range (whisker) and tooltip."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None
    tooltip: str = ""
    color: str = BAR_COLORS[0]


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
    """Horizontal bars (or points with whiskers when points=True); an optional vertical reference line."""
    row_h, top, bottom = 18, 28, 28
    plot_w = width - label_width - 20
    height = top + bottom + row_h * max(len(bars), 1)
    values = [b.value for b in bars] + [b.high for b in bars if b.high is not None]
    if reference is not None:
        values.append(reference[0])
    ticks = _ticks(maximum if maximum is not None else max(values, default=0.0))
    scale_max = ticks[-1]

    def x(value: float) -> float:
        return label_width + plot_w * min(max(value / scale_max, 0.0), 1.0)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} role='img'>",
        f"<title>{escape(title)}</title>",
        f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>",
    ]
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
            f"<line x1='{rx:.1f}' y1='{top - 6}' x2='{rx:.1f}' y2='{height - bottom}' stroke='#c62828' "
            "stroke-dasharray='4 3'/>"
        )
        out.append(f"<text x='{rx + 3:.1f}' y='{top - 8}' fill='#c62828'>{escape(reference[1])}</text>")
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Tile:
    """One coloured tile of a heatmap position (several when cells share a position)."""

    color: str
    text: str
    tooltip: str


def heatmap(title: str, rows: list[str], columns: list[str], tiles: dict[tuple[str, str], list[Tile]]) -> str:
    """A grid of coloured tiles: rows x columns; a position with several tiles is split across."""
    cell_w, cell_h, left, top = 150, 34, 90, 46
    width = max(left + cell_w * max(len(columns), 1) + 10, 8 * len(title) + 10)
    height = top + cell_h * max(len(rows), 1) + 10
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} role='img'>",
        f"<title>{escape(title)}</title>",
        f"<text x='4' y='16' font-weight='bold'>{escape(title)}</text>",
    ]
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
                out.append(f"<g><title>{escape(tile.tooltip)}</title>")
                out.append(
                    f"<rect x='{tx:.1f}' y='{y + 1}' width='{part - 1:.1f}' height='{cell_h - 2}' fill='{tile.color}'/>"
                )
                out.append(
                    f"<text x='{tx + part / 2:.1f}' y='{y + cell_h / 2 + 4:.1f}' text-anchor='middle' "
                    f"fill='#ffffff'>{escape(tile.text)}</text></g>"
                )
    out.append("</svg>")
    return "\n".join(out)
