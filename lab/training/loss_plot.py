"""Train and eval loss against step, as a small self-contained SVG drawn by hand.

The lab plots in the browser with plotly, but a training run wants one file that opens
anywhere, diffs as text and needs nothing installed; matplotlib is not a dependency.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 40, 48
# (log key, legend, colour, dots): eval points are few and far apart, so each gets a dot.
SERIES = (("loss", "train", "#1f77b4", False), ("eval_loss", "eval", "#d62728", True))


def read_losses(log_path: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, loss) per series, sorted by step. A run resumed from an older checkpoint logs
    some steps twice; the later record wins, as it belongs to the run that went on."""
    series: dict[str, dict[int, float]] = {key: {} for key, *_ in SERIES}
    for line in Path(log_path).read_text().splitlines():
        record = json.loads(line)
        for key in series:
            if key in record:
                series[key][record["step"]] = record[key]
    return {key: sorted(points.items()) for key, points in series.items()}


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    return [first + i * step for i in range(int(math.ceil((hi - first) / step)) + 1)]


def plot_losses(log_path: Path, svg_path: Path, title: str = "Training loss") -> Path:
    losses = read_losses(log_path)
    points = [p for series in losses.values() for p in series]
    if not points:
        raise ValueError(f"{log_path} holds no train or eval loss to plot")
    xticks = nice_ticks(0, max(step for step, _ in points))
    yticks = nice_ticks(min(v for _, v in points), max(v for _, v in points))
    x0, x1, y0, y1 = xticks[0], xticks[-1], yticks[0], yticks[-1]

    def x(step: float) -> float:
        return LEFT + (step - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - (value - y0) / (y1 - y0) * (HEIGHT - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>']
    for t in xticks:
        out.append(f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{HEIGHT - BOTTOM}" '
                   f'stroke="#eee"/><text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" '
                   f'text-anchor="middle">{t:g}</text>')
    for t in yticks:
        out.append(f'<line x1="{LEFT}" y1="{y(t):.1f}" x2="{WIDTH - RIGHT}" y2="{y(t):.1f}" '
                   f'stroke="#eee"/><text x="{LEFT - 6}" y="{y(t) + 4:.1f}" '
                   f'text-anchor="end">{t:g}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
               f'height="{HEIGHT - TOP - BOTTOM}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 12}" '
               f'text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{(TOP + HEIGHT - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(TOP + HEIGHT - BOTTOM) / 2})">loss</text>')
    shown = [series for series in SERIES if losses[series[0]]]
    for i, (key, name, color, dots) in enumerate(shown):
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in losses[key])
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                   f'points="{path}"/>')
        if dots:
            out.extend(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}"/>'
                       for s, v in losses[key])
        ly = TOP + 14 + 16 * i
        out.append(f'<line x1="{WIDTH - RIGHT - 70}" y1="{ly - 4}" x2="{WIDTH - RIGHT - 52}" '
                   f'y2="{ly - 4}" stroke="{color}" stroke-width="2"/>'
                   f'<text x="{WIDTH - RIGHT - 46}" y="{ly}">{name}</text>')
    out.append("</svg>")
    svg_path = Path(svg_path)
    svg_path.parent.mkdir(parents=True, exist_ok=True)
    svg_path.write_text("\n".join(out) + "\n")
    return svg_path
