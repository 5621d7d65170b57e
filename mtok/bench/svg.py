"""A line chart as a hand-written SVG file: no plotting library, readable diffs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple
from xml.sax.saxutils import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 84, 170, 40, 50


@dataclass
class Series:
    name: str
    points: List[Tuple[float, float]]
    dashed: bool = False


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: List[Series] = field(default_factory=list)
    x_ticks: Optional[Sequence[float]] = None  # default: the x values of the data

    def add(self, name: str, points: Sequence[Tuple[float, float]], dashed: bool = False) -> None:
        self.series.append(Series(name, list(points), dashed))

    def render(self) -> str:
        xs = sorted({x for s in self.series for x, _ in s.points}) or [0.0, 1.0]
        x_ticks = list(self.x_ticks or xs)
        x_lo, x_hi = min(x_ticks + xs), max(x_ticks + xs)
        y_hi = nice_ceiling(max([y for s in self.series for _, y in s.points] + [1e-9]))
        plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

        def px(x: float) -> float:
            return LEFT + (plot_w * (x - x_lo) / (x_hi - x_lo) if x_hi > x_lo else plot_w / 2)

        def py(y: float) -> float:
            return TOP + plot_h * (1 - y / y_hi)

        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
            _text(WIDTH / 2 - RIGHT / 2 + LEFT / 2, 22, self.title, size=14, anchor="middle", weight="bold"),
        ]
        for i in range(6):  # horizontal grid and y labels
            y = y_hi * i / 5
            out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" '
                       f'stroke="#ddd"/>')
            out.append(_text(LEFT - 6, py(y) + 4, _num(y), anchor="end"))
        for x in x_ticks:
            out.append(f'<line x1="{px(x):.1f}" y1="{TOP + plot_h}" x2="{px(x):.1f}" y2="{TOP + plot_h + 5}" '
                       f'stroke="#333"/>')
            out.append(_text(px(x), TOP + plot_h + 18, _num(x), anchor="middle"))
        out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
        out.append(_text(LEFT + plot_w / 2, HEIGHT - 10, self.x_label, anchor="middle"))
        out.append(_text(16, TOP + plot_h / 2, self.y_label, anchor="middle",
                         transform=f"rotate(-90 16 {TOP + plot_h / 2:.1f})"))
        for i, s in enumerate(self.series):
            color = COLORS[i % len(COLORS)]
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(s.points))
            dash = ' stroke-dasharray="6 4"' if s.dashed else ""
            out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            if not s.dashed:
                out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}"/>' for x, y in s.points)
            ly = TOP + 10 + 20 * i
            out.append(f'<line x1="{WIDTH - RIGHT + 12}" y1="{ly}" x2="{WIDTH - RIGHT + 36}" y2="{ly}" '
                       f'stroke="{color}" stroke-width="2"{dash}/>')
            out.append(_text(WIDTH - RIGHT + 42, ly + 4, s.name))
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.render())


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * base >= value:
            return step * base
    return 10 * base


def _num(v: float) -> str:
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "start", weight: str = "normal",
          transform: str = "") -> str:
    extra = f' transform="{transform}"' if transform else ""
    bold = f' font-weight="{weight}"' if weight != "normal" else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{bold}{extra}>'
            f"{escape(text)}</text>")
