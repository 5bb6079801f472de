"""A metric's history as a standalone SVG line chart: judged runs as points on a line, runs whose
check did not judge its numbers (invalid, error) as grey marks on the axis (never scaled to), and
change points as dashed vertical lines with their change."""

from __future__ import annotations

import math
from html import escape

from canary.core.svg import DATA_COLORS, FONT, NOT_TO_SCALE_STROKE
from canary.export.history.findings import JUDGED, Finding
from canary.export.history.store import Point

# data colours, never verdict colours (canary.core.svg.DATA_COLORS)
LINE = DATA_COLORS[0]
CHANGE = DATA_COLORS[3]
UNJUDGED = NOT_TO_SCALE_STROKE


def _nice_range(low: float, high: float) -> tuple[float, float]:
    if low == high:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.1
    return low - pad, high + pad


def history_svg(
    title: str, points: list[Point], findings: list[Finding], *, width: int = 720, height: int = 300
) -> str:
    """The chart; x: runs in order (labelled by index, run ids in tooltips), y: the metric."""
    left, right, top, bottom = 70, 20, 30, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    judged = [p.value for p in points if p.check_verdict in JUDGED and math.isfinite(p.value)]
    low, high = _nice_range(min(judged, default=0.0), max(judged, default=1.0))
    count = max(len(points), 2)

    def x(index: int) -> float:
        return left + plot_w * index / (count - 1)

    def y(value: float) -> float:
        return top + plot_h * (1.0 - (value - low) / (high - low))

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"role='img' aria-label='{escape(title, quote=True)}'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        f"<text x='{left}' y='18' {FONT} font-weight='bold'>{escape(title)}</text>",
        f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#444'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='#444'/>",
    ]
    for step in range(5):
        value = low + (high - low) * step / 4
        parts.append(
            f"<text x='{left - 6}' y='{y(value) + 4:.1f}' {FONT} text-anchor='end'>{value:.4g}</text>"
            f"<line x1='{left}' y1='{y(value):.1f}' x2='{left + plot_w}' y2='{y(value):.1f}' stroke='#eee'/>"
        )
    for index in range(len(points)):
        if len(points) <= 20 or index % math.ceil(len(points) / 20) == 0:
            parts.append(
                f"<text x='{x(index):.1f}' y='{top + plot_h + 16}' {FONT} text-anchor='middle'>{index + 1}</text>"
            )
    parts.append(f"<text x='{left + plot_w / 2}' y='{height - 6}' {FONT} text-anchor='middle'>run</text>")
    for finding in findings:
        position = next((i for i, p in enumerate(points) if p.run_id == finding.run_id), None)
        if position is None:
            continue
        parts.append(
            f"<line x1='{x(position) - plot_w / (2 * (count - 1)):.1f}' y1='{top}' "
            f"x2='{x(position) - plot_w / (2 * (count - 1)):.1f}' y2='{top + plot_h}' stroke='{CHANGE}' "
            f"stroke-dasharray='4 3'><title>{escape(finding.sentence())}</title></line>"
            f"<text x='{x(position):.1f}' y='{top + 12}' {FONT} fill='{CHANGE}'>{finding.relative_change:+.0%}</text>"
        )
    path = [
        f"{x(i):.1f},{y(p.value):.1f}"
        for i, p in enumerate(points)
        if p.check_verdict in JUDGED and math.isfinite(p.value)
    ]
    if path:
        parts.append(f"<polyline points='{' '.join(path)}' fill='none' stroke='{LINE}' stroke-width='1.5'/>")
    for i, p in enumerate(points):
        tip = escape(f"{p.run_id}: {p.value:.4g} ({p.check_verdict}, image {p.image_ref})")
        if p.check_verdict in JUDGED and math.isfinite(p.value):
            parts.append(
                f"<circle cx='{x(i):.1f}' cy='{y(p.value):.1f}' r='3' fill='{LINE}'><title>{tip}</title></circle>"
            )
        else:
            cx, cy = x(i), top + plot_h
            parts.append(
                f"<path d='M{cx - 4:.1f},{cy - 4:.1f} l8,8 m0,-8 l-8,8' stroke='{UNJUDGED}' stroke-width='2'>"
                f"<title>{tip}: not judged, not plotted</title></path>"
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
